"""`ControllerSettings` declared once: its fields' flags make the click options of
``simrun service`` (flag, environment variable, default, help)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from click.testing import CliRunner

from simrun.config import click_options, flags
from simrun.core.intake import InputLimits
from simrun.core.states import Limits
from simrun.service.settings import ControllerSettings


@click.command()
@click_options(ControllerSettings)
def show(settings: ControllerSettings) -> None:
    click.echo(repr(settings))


def test_every_option_field_is_a_flag_with_its_default(tmp_path: Path) -> None:
    result = CliRunner().invoke(show, [], env={"SIMRUN_STORE": str(tmp_path)})
    assert result.exit_code == 0, result.output
    want = ControllerSettings(store=tmp_path.resolve(), redis_url="redis://127.0.0.1:6379/0")
    assert result.output.strip() == repr(want)
    # the limits of a unit and of a submission are an option per field
    names = set(flags(ControllerSettings)) - {"limits", "intake"}
    names |= {f.name for group in (Limits, InputLimits) for f in dataclasses.fields(group)}
    assert {p.name for p in show.params} == names


def test_flags_and_environment_variables_set_their_field(tmp_path: Path) -> None:
    args = ["--store", str(tmp_path), "--no-probe", "--redis-wait-s", "3", "--db", "x.db"]
    env = {"SIMRUN_ENVIRONMENT_IMAGE": "env:1", "REDIS_URL": "redis://r:1/2"}
    result = CliRunner().invoke(show, args, env=env)
    assert result.exit_code == 0, result.output
    want = ControllerSettings(
        store=tmp_path.resolve(), redis_url="redis://r:1/2", probe=False, redis_wait_s=3.0,
        db_path=Path("x.db").resolve(), environment_image="env:1",
    )  # fmt: skip
    assert result.output.strip() == repr(want)
    assert "[env var: SIMRUN_DB]" in CliRunner().invoke(show, ["--help"]).output
