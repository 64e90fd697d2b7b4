"""The views of runs (`simrun.core.views`) built from stored rows (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from simrun.core.states import TaskCounts, UnitRow
from simrun.core.views import FailureView, RunSummary, RunView, TaskView
from simrun.runstore import RunRow, TaskRow
from simrun.service.decisions import eta_s

__all__ = ["failure_view", "run_summary", "run_view", "task_view"]


def task_view(task: TaskRow, counts: TaskCounts | None, processes: int) -> TaskView:
    """A task's view; ``processes`` are the live worker processes of its queue."""
    counts = counts or TaskCounts()
    spu = (task.resources or {}).get("seconds_per_unit")
    remaining = counts.unfinished if task.units is not None else 0
    if task.state in ("done", "failed", "cancelled"):
        eta: float | None = 0.0
    elif task.units is None:
        eta = None
    else:
        eta = eta_s(remaining, spu, processes)
    return TaskView(
        name=task.name,
        type=task.type,
        state=task.state,
        status=task.status,
        queue=task.queue,
        resource_key=task.resource_key,
        resources=task.resources,
        units=task.units,
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
        depends=task.depends,
        splittable=task.splittable,
        started_s=task.started_s,
        finished_s=task.finished_s,
        kills=task.kills,
        requested_gb=task.requested_gb,
        peak_memory_gb=task.peak_memory_gb,
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
    etas = [v.eta_s for v in views if v.state not in ("done", "failed", "cancelled")]
    total: float | None = None
    if run.state == "running":
        total = None if any(e is None for e in etas) else sum(e for e in etas if e is not None)
    return RunView(
        id=run.id,
        name=run.name,
        model=run.model,
        state=run.state,
        message=run.message,
        created_s=run.created_s,
        updated_s=run.updated_s,
        finished_s=run.finished_s,
        tasks=views,
        eta_s=total if run.state == "running" else 0.0,
    )


def failure_view(unit: UnitRow) -> FailureView:
    return FailureView(
        task=unit.task,
        unit=unit.key,
        attempt=unit.attempt,
        errors=unit.errors,
        kills=unit.kills,
        worker=unit.worker,
        error=unit.error,
    )


def run_summary(run: RunRow) -> RunSummary:
    """A run in a list of the latest runs."""
    return RunSummary(**{f.name: getattr(run, f.name) for f in fields(RunSummary)})
