"""The web app's decisions (`simrun.service.dashboard`), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from simrun.core.sizing import WorkerCapacity
from simrun.core.views import RunView, TaskView
from simrun.service.dashboard import (
    PlanRow,
    forecast_rows,
    keep_run,
    run_line,
    slots_on,
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


def _plan(**more: Any) -> PlanRow:
    fields: dict[str, Any] = {
        "name": "t", "type": "x", "splittable": True, "units": 100, "queue": "cpu",
        "memory_per_worker_gb": 1.0, "memory_base_gb": 0.5, "gpus": 0,
        "seconds_per_unit": 2.0, "source": "learned",
    }  # fmt: skip
    return PlanRow(**{**fields, **more})


CPU4 = WorkerCapacity("cpu4", ("cpu",), memory_gb=8.0, processes=4, gpus=0)
SMALL = WorkerCapacity("small", ("cpu",), memory_gb=2.0, processes=4, gpus=0)
GPU = WorkerCapacity("gpu", ("gpu",), memory_gb=32.0, processes=4, gpus=2)


@pytest.mark.parametrize(
    ("plan", "pool", "slots"),
    [
        (_plan(), [CPU4], 4),
        (_plan(), [CPU4, SMALL], 6),  # memory leaves 2 of SMALL's processes
        (_plan(memory_per_worker_gb=16.0), [CPU4], 0),
        (_plan(queue="gpu", gpus=1), [GPU, CPU4], 2),
        (_plan(splittable=False), [CPU4], 1),
        (_plan(splittable=False, memory_base_gb=8.0), [CPU4], 0),
        # a command that uses the cores asks for every process of the container
        (_plan(splittable=False, memory_base_gb=0.5, memory_per_worker_gb=2.0), [CPU4], 1),
        (
            _plan(splittable=False, memory_base_gb=0.5, memory_per_worker_gb=2.0, uses_cores=True),
            [CPU4],
            0,
        ),
        (_plan(), [], 0),
    ],
)
def test_slots_on_the_live_pool(plan: PlanRow, pool: list[WorkerCapacity], slots: int) -> None:
    """Units run at once: per worker of the task's queue, its processes that memory (and
    GPUs) allow; a command runs once where its whole memory fits (every process's worth
    for one that uses the cores): the dry run's rule."""
    assert slots_on(plan, pool) == slots


def test_the_forecast_on_the_live_pool() -> None:
    """Core-hours are units x seconds per unit; the ETA is in waves of the slots; a task
    no worker serves says so; the run's ETA is unknown while a task's is."""
    found = forecast_rows([_plan()], [CPU4])
    (task,) = found["tasks"]
    assert task["core_hours"] == pytest.approx(100 * 2.0 / 3600)
    assert task["eta_s"] == pytest.approx(25 * 2.0)
    assert task["problem"] is None
    assert found["eta_s"] == pytest.approx(50.0)
    none = forecast_rows([_plan(seconds_per_unit=None)], [])
    assert none["tasks"][0]["problem"] == "no live worker serves the cpu queue"
    assert none["eta_s"] is None
    assert none["core_hours"] is None
