"""The views of runs (`simrun.core.views`) built from stored rows (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from simrun.core.states import FINISHED_TASK_STATES, TaskCounts, UnitRow
from simrun.core.views import FailureView, RunSummary, RunView, TaskView
from simrun.runstore import RunRow, TaskRow
from simrun.service.decisions import eta_s

__all__ = ["failure_view", "run_summary", "run_view", "task_view"]


def _shared(row: Any, view: type[Any]) -> dict[str, Any]:
    """The fields of the stored ``row`` that the ``view`` dataclass shows as they are (same
    name, same meaning)."""
    shown = {f.name for f in fields(view)}
    return {f.name: getattr(row, f.name) for f in fields(row) if f.name in shown}


def task_view(task: TaskRow, counts: TaskCounts | None, processes: int) -> TaskView:
    """A task's view; ``processes`` are the live worker processes of its queue."""
    counts = counts or TaskCounts()
    spu = (task.resources or {}).get("seconds_per_unit")
    remaining = counts.unfinished if task.units is not None else 0
    if task.state in FINISHED_TASK_STATES:
        eta: float | None = 0.0
    elif task.units is None:
        eta = None
    else:
        eta = eta_s(remaining, spu, processes)
    return TaskView(
        **_shared(task, TaskView),
        counts={
            "pending": counts.pending,
            "queued": counts.queued,
            "running": counts.running,
            "done": counts.done,
            "failed": counts.failed,
        },
        merge=counts.merge,
        seconds_per_unit=spu,
        eta_s=eta,
    )


def run_view(
    run: RunRow,
    tasks: Sequence[TaskRow],
    counts: Mapping[str, TaskCounts],
    processes_by_queue: Mapping[str, int],
) -> RunView:
    """A run's view from its rows, its unit counts and the live processes per queue."""
    views = tuple(
        task_view(t, counts.get(t.name), processes_by_queue.get(t.queue or "cpu", 0)) for t in tasks
    )
    etas = [v.eta_s for v in views if v.state not in FINISHED_TASK_STATES]
    total: float | None = None
    if run.state == "running":
        total = None if any(e is None for e in etas) else sum(e for e in etas if e is not None)
    return RunView(
        **_shared(run, RunView), tasks=views, eta_s=total if run.state == "running" else 0.0
    )


def failure_view(unit: UnitRow) -> FailureView:
    """A failed unit's view (``unit`` is its key: the index, or the command's name)."""
    return FailureView(**_shared(unit, FailureView), unit=unit.key)


def run_summary(run: RunRow) -> RunSummary:
    """A run in a list of the latest runs."""
    return RunSummary(**_shared(run, RunSummary))
