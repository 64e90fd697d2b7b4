"""The views of runs (`simrun.core.views`) built from stored rows (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from simrun.core.eta import ObservedRate, TaskEta, run_eta_s, task_eta_s
from simrun.core.states import FINISHED_TASK_STATES, TaskCounts, UnitRow, shown_run_state
from simrun.core.views import FailureView, RunSummary, RunView, TaskView
from simrun.runstore.rows import RunRow, TaskRow


def _shared(row: Any, view: type[Any]) -> dict[str, Any]:
    """The fields of the stored ``row`` that the ``view`` dataclass shows as they are."""
    shown = {f.name for f in fields(view)}
    return {f.name: getattr(row, f.name) for f in fields(row) if f.name in shown}


def task_view(
    task: TaskRow, counts: TaskCounts | None, processes: int, observed: ObservedRate | None = None
) -> TaskView:
    """A task's view (``processes``: the live processes of its queue)."""
    counts = counts or TaskCounts()
    spu = (task.resources or {}).get("seconds_per_unit")
    remaining = counts.unfinished if task.units is not None else 0
    if task.state in FINISHED_TASK_STATES:
        eta: float | None = 0.0
    elif task.units is None:
        eta = None
    else:
        eta = task_eta_s(remaining, spu, processes, observed)
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
        units_per_s=None if observed is None else observed.units_per_s,
    )


def run_view(
    run: RunRow,
    tasks: Sequence[TaskRow],
    counts: Mapping[str, TaskCounts],
    processes_by_queue: Mapping[str, int],
    observed: Mapping[str, ObservedRate] | None = None,
    held: bool = False,
) -> RunView:
    """A run's view from its rows, counts, live processes and observed rates (``held``:
    `INTERRUPTED`)."""
    observed = observed or {}
    views = tuple(
        task_view(
            t, counts.get(t.name), processes_by_queue.get(t.queue or "cpu", 0), observed.get(t.name)
        )
        for t in tasks
    )
    total: float | None = 0.0
    if run.state == "running":
        total = run_eta_s(
            [
                TaskEta(
                    v.name, t.depends, t.queue or "cpu", v.state in FINISHED_TASK_STATES, v.eta_s
                )
                for t, v in zip(tasks, views, strict=True)
            ]
        )
    shown = {**_shared(run, RunView), "state": shown_run_state(run.state, held)}
    return RunView(**shown, tasks=views, eta_s=total)


def failure_view(unit: UnitRow) -> FailureView:
    """A failed unit's view (``unit`` is its key: the index, or the command's name)."""
    return FailureView(**_shared(unit, FailureView), unit=unit.key)


def run_summary(run: RunRow) -> RunSummary:
    """A run in a list of the latest runs."""
    return RunSummary(**_shared(run, RunSummary))
