"""The lines of the web app's runs list and unit pages (`simrun.service.views`), as tables."""

from __future__ import annotations

import pytest

from simrun.core.views import RunView, TaskView
from simrun.service.views import (
    keep_run,
    run_line,
)


def _task(name: str, units: int, kills: int = 0, **counts: int) -> TaskView:
    return TaskView(
        name=name, type="t", state="running", status="", queue="cpu", resources=None,
        units=units, counts=counts, merge=None, seconds_per_unit=None, eta_s=None, kills=kills,
    )  # fmt: skip


def test_a_run_s_line_adds_up_its_tasks_and_leaves_pauses_out() -> None:
    """A run's line counts its units done of all, running, failed and killed over its
    tasks; its running time is up to now (or its end) less its pauses."""
    view = RunView(
        id="r", name="n", state="running", message="", created_s=100.0, updated_s=0.0,
        finished_s=None, pauses=((110.0, 130.0),),
        tasks=(_task("a", 10, kills=1, done=4, failed=1), _task("b", 5, running=2)),
    )  # fmt: skip
    line = run_line(view, now_s=200.0)
    assert (line["units"], line["done"], line["running"], line["failed"]) == (15, 4, 2, 1)
    assert line["killed"] == 1
    assert line["running_s"] == pytest.approx(80.0)


LINE = {"id": "20261201-1-abc", "name": "Heat sweep", "model": "plate", "state": "running"}


@pytest.mark.parametrize(
    ("state", "text", "kept"),
    [
        (None, None, True),
        ("running", None, True),
        ("failed", None, False),
        (None, "heat", True),
        (None, "PLATE", True),
        (None, "abc", True),
        (None, "  ", True),
        ("running", "other", False),
    ],
)
def test_the_runs_filter(state: str | None, text: str | None, kept: bool) -> None:
    """The runs list keeps a run in the state asked (any without one) whose id, name or
    model holds the text, case ignored (any without one)."""
    assert keep_run(LINE, state, text) is kept
