"""The pure parts of embedded mode: this machine's defaults, the key prefix of a session,
the options of ``simrun run`` made from `LocalOptions`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import pytest

from simrun.cli.run import run
from simrun.config import options_of
from simrun.local.guard import watch
from simrun.local.machine import LocalError, default_capacity
from simrun.local.session import redis_prefix
from simrun.local.settings import LocalOptions
from simrun.local.start import LocalPool, local_pool, ready_session


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((8, 20.0, 1, None, None), (8, 16.0)),  # all cores, 80% of the free memory
        ((8, 20.0, 2, None, None), (4, 8.0)),  # shared among the containers
        ((8, 20.0, 3, None, None), (2, 5.3)),  # rounded down to a tenth
        ((1, 20.0, 4, None, None), (1, 4.0)),  # at least one process each
        ((8, 0.1, 1, None, None), (8, 0.25)),  # at least a quarter GiB
        ((8, 20.0, 2, 3, 6.5), (3, 6.5)),  # what is given wins
    ],
)
def test_default_capacity(args, expected):
    """Processes and memory per worker container from this machine, unless given."""
    assert default_capacity(*args) == expected


def test_default_capacity_refuses_no_workers():
    """Zero containers is a mistake, said so."""
    with pytest.raises(ValueError, match="workers must be >= 1"):
        default_capacity(8, 20.0, 0)


def test_redis_prefix_is_the_default_on_a_private_server_else_one_per_store():
    """A private Redis is ours alone; a shared one gets a prefix of the store, the same for
    the same store (a later session finds its queues), another for another store."""
    stores = Path("/no/such/stores")  # paths only: nothing is created or read
    assert redis_prefix(stores / "a", private=True) == "simrun"
    shared = redis_prefix(stores / "a", private=False)
    assert shared.startswith("simrun-local-")
    assert redis_prefix(stores / "a", private=False) == shared
    assert redis_prefix(stores / "b", private=False) != shared


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["12\n", "34\n", "rm /tmp/simrun-redis-x\n"], ([12, 34], ["/tmp/simrun-redis-x"])),
        (["12\n", "done\n", "34\n"], ([], [])),  # the session stopped them itself
        (["12\n", "rm /tmp/with space\n"], ([12], ["/tmp/with space"])),
        (["\n", "nonsense\n"], ([], [])),
        ([], ([], [])),
    ],
)
def test_guard_watch(lines, expected):
    """The guard ends what it was told of when its input ends, nothing after `done`."""
    assert watch(lines) == expected


def test_the_options_of_simrun_run_that_configure_the_session_are_its_settings() -> None:
    """Each flag of `LocalOptions` (those of its limits too) is an option of ``simrun run``
    with its name, variable and default; the session's settings take no other option."""
    options = {p.name: p for p in run.params if isinstance(p, click.Option)}
    declared = options_of(LocalOptions)
    for name, flag, value in declared:
        assert options[name].opts[0] == f"--{flag.name}", name
        assert options[name].envvar == flag.env, name
        assert options[name].default == value, name
    assert set(options) - {name for name, _, _ in declared} == {
        "overrides", "reuse", "rerun", "dry_run", "resume", "every_s", "open_browser"
    }  # fmt: skip


def test_ready_session_gives_the_session_the_pool_it_runs_on(monkeypatch):
    """The options `ready_session` makes carry the pool (the forecast's, when given) and
    hold the interrupted runs; a pool of no workers is refused before the machine is read."""
    monkeypatch.setattr("simrun.local.start.local_engine", lambda named: named)
    pool = LocalPool(2, 3, 4.5, ("0", "1"))
    settings = LocalOptions(Path("/store"), workers=2)
    options, given = asyncio.run(ready_session(settings, {}, pool=pool))
    assert given is pool
    assert (options.workers, options.processes, options.memory_gb) == (2, 3, 4.5)
    assert options.gpu_ids == ("0", "1")
    assert options.hold_interrupted
    with pytest.raises(LocalError, match="workers must be at least 1, not 0"):
        local_pool(LocalOptions(Path("/store"), workers=0))
