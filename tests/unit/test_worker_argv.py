"""The command line of a worker container (`WorkerSettings.to_argv`) says what it was built
from: parsed back by the real ``simrun worker`` command, it gives the same flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.cli.worker import worker
from simrun.worker.settings import WorkerSettings, worker_argv

FLAGS = [
    pytest.param(WorkerSettings(), id="defaults"),
    pytest.param(
        WorkerSettings(
            queues=("cpu", "gpu"),
            images=("ghcr.io/lab/solver:1.2", "plain"),
            redis_url="redis://:secret@127.0.0.1:6390/0",
            prefix="simrun-local-0123456789",
            memory_gb=2.5,
            processes=3,
            worker_id="local-123-1",
            grace_s=7.5,
            plugins=("tests.support.tasks:SLEEP", "mod:OBJ"),
            python_path=("/repo", "/other dir"),
            store=Path("/tmp/the store"),
        ),
        id="embedded session",
    ),
    pytest.param(
        WorkerSettings(
            queues=("gpu",),
            gpus=0,
            burst=True,
            poll_delay_s=0.01,
            prefetch=0,
            heartbeat_s=0.3,
            heartbeat_ttl_s=1.5,
            log_level="DEBUG",
        ),
        id="test harness",
    ),
    pytest.param(
        WorkerSettings(memory_gb=0.1 + 0.2, grace_s=0.0, heartbeat_s=1 / 3), id="floats exactly"
    ),
]


def parse(argv: list[str]) -> WorkerSettings:
    """What ``simrun worker ARGV`` would run with, without running it."""
    ctx = worker.make_context("worker", list(argv))
    return WorkerSettings(**ctx.params)


@pytest.mark.parametrize("flags", FLAGS)
def test_to_argv_parses_back_to_the_same_flags(flags: WorkerSettings) -> None:
    """Every flag survives the trip through the command line, floats to the last bit."""
    assert parse(flags.to_argv()) == flags


@pytest.mark.parametrize("flags", FLAGS)
def test_to_argv_leaves_nothing_to_the_environment(
    flags: WorkerSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child started with ``to_argv`` takes Redis and the store from its command line, not
    from the REDIS_URL or SIMRUN_STORE it inherits."""
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:1/0")
    monkeypatch.setenv("SIMRUN_STORE", "/elsewhere")
    assert parse(flags.to_argv()) == flags


def test_the_defaults_are_the_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """`WorkerSettings` defaults to what ``simrun worker`` does without arguments."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("SIMRUN_STORE", raising=False)
    assert parse([]) == WorkerSettings()


def test_worker_argv_runs_the_worker_module() -> None:
    """A child worker is ``PYTHON -m simrun.cli worker`` with the flags' arguments."""
    flags = WorkerSettings(queues=("cpu",))
    assert worker_argv(flags, "/py") == ["/py", "-m", "simrun.cli", "worker", *flags.to_argv()]
