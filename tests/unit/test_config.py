"""The shared configuration: how a URL is shown in messages."""

from __future__ import annotations

import pytest

from simrun.config import redact_url

URLS = [
    ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
    ("redis://me:s3cret@redis:6379/0", "redis://me:***@redis:6379/0"),
    ("redis://redis:6379/0", "redis://redis:6379/0"),
    ("rediss://:p%40ss@h:1/2", "rediss://:***@h:1/2"),
    ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
]


@pytest.mark.parametrize(("url", "shown"), URLS)
def test_redact_url(url: str, shown: str) -> None:
    """A Redis URL in a message never shows its password."""
    assert redact_url(url) == shown
