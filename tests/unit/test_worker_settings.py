"""The settings of ``simrun worker`` are declared once (`WorkerSettings`): the command's
options are made from its fields, and settings that cannot run are refused when made."""

from __future__ import annotations

import click
import pytest

from simrun.cli.worker import worker
from simrun.config import Flag, flags
from simrun.worker.settings import WorkerSettings


def test_every_option_of_simrun_worker_is_a_setting() -> None:
    """One option per flag of `WorkerSettings`, with its flag, variable and default."""
    options = {p.name: p for p in worker.params if isinstance(p, click.Option)}
    assert set(options) == set(flags(WorkerSettings))
    defaults = WorkerSettings()
    for name, flag in flags(WorkerSettings).items():
        assert isinstance(flag, Flag)
        assert options[name].opts == [f"--{flag.name}"], name
        assert options[name].envvar == flag.env, name
        assert options[name].default == getattr(defaults, name), name


def test_the_fields_without_a_flag_are_not_options() -> None:
    """What only a program sets (admission patience, the spool's memory) has no flag."""
    assert {"admission_patience_s", "spool_memory_mb"}.isdisjoint(flags(WorkerSettings))


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"heartbeat_s": 2.0, "heartbeat_ttl_s": 1.0}, "1 s is not longer than"),
        ({"grace_s": -1.0}, "grace_s must be >= 0"),
        ({"cgroups": "on"}, "cgroups must be one of"),
        ({"unit_log_cap": -1}, "must be >= 0 bytes"),
    ],
)
def test_settings_that_cannot_run_are_refused_when_made(
    more: dict[str, object], message: str
) -> None:
    """A heartbeat that would expire between two beats, a negative grace or cap, an unknown
    cgroups mode: `ValueError` at once, not when the container starts."""
    with pytest.raises(ValueError, match=message):
        WorkerSettings(**more)  # type: ignore[arg-type]


def test_the_queues_of_images_follow_the_queue_flags() -> None:
    """--queue and --image give the logical queues in order, once each; cpu without any."""
    assert WorkerSettings().queue_names == ("cpu",)
    settings = WorkerSettings(queues=("gpu", "cpu"), images=("solver", "solver"))
    assert settings.queue_names == ("gpu", "cpu", "image:solver")
