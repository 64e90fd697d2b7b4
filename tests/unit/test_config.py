"""The shared configuration: how a URL is shown in messages, one declaration of a setting."""

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


@pytest.mark.parametrize(
    "name",
    ["store", "plugins", "grace_s", "probe", "redis_wait_s", "redis_timeout_s", "max_retries",
     "max_tasks", "prefix", "token"],
)  # fmt: skip
def test_a_setting_several_commands_take_reads_the_same_on_each(name: str) -> None:
    """Where ``simrun worker``, ``service`` and ``run`` share a setting, its option has one
    help and one environment variable (it is declared once, in `simrun.config`)."""
    from simrun.cli.run import run
    from simrun.cli.service import service
    from simrun.cli.worker import worker

    found = [p for c in (worker, service, run) for p in c.params if p.name == name]
    assert len(found) >= 2, name
    assert len({(p.help, p.envvar) for p in found}) == 1, name
