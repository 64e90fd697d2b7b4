"""The dashboard's URL as `simrun run` prints it (`simrun.cli.dashboard`)."""

from __future__ import annotations

import pytest

from simrun.cli.dashboard import dashboard_url


@pytest.mark.parametrize(
    ("service", "run", "url"),
    [
        ("http://127.0.0.1:8765", None, "http://127.0.0.1:8765/"),
        ("http://127.0.0.1:8765/", "20261201-1-abc", "http://127.0.0.1:8765/#/runs/20261201-1-abc"),
        ("http://h:1", "a/b c", "http://h:1/#/runs/a%2Fb%20c"),
    ],
)
def test_the_dashboard_url(service: str, run: str | None, url: str) -> None:
    """The page of a run is the service's root with the run in the fragment (no server
    logs a fragment; the token is never in it)."""
    assert dashboard_url(service, run) == url
