"""What the API sends of runs, built from stored rows (pure): the views of runs
(`simrun.core.views`), and the lines of the web app's runs list and unit pages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from simrun.core.eta import ObservedRate, TaskEta, run_eta_s, task_eta_s
from simrun.core.states import FINISHED_TASK_STATES, TaskCounts, UnitRow, shown_run_state
from simrun.core.views import FailureView, RunSummary, RunView, TaskView, running_seconds
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


#: The most units one page of a strip holds.
MAX_PAGE = 500


def run_line(view: RunView, now_s: float) -> dict[str, Any]:
    """A run's line in the runs list: its state, units done of all, failed and killed
    units, when it started, how long it ran (pauses left out) and its ETA."""
    units = sum(t.units or 0 for t in view.tasks)
    done = sum(t.count("done") for t in view.tasks)
    failed = sum(t.count("failed") for t in view.tasks)
    running = sum(t.count("running") for t in view.tasks)
    killed = sum(t.kills or 0 for t in view.tasks)
    end = view.finished_s if view.finished_s is not None else now_s
    return {
        "id": view.id,
        "name": view.name,
        "state": view.state,
        "message": view.message,
        "model": view.model,
        "created_s": view.created_s,
        "finished_s": view.finished_s,
        "running_s": running_seconds(view.created_s, end, view.pauses),
        "eta_s": view.eta_s,
        "tasks": len(view.tasks),
        "units": units,
        "done": done,
        "running": running,
        "failed": failed,
        "killed": killed,
    }


def keep_run(line: Mapping[str, Any], state: str | None, text: str | None) -> bool:
    """Whether the runs list shows ``line`` under a filter: its state (None: any) and a
    text found, case ignored, in its id, name or model (None or blank: any)."""
    if state and line.get("state") != state:
        return False
    needle = (text or "").strip().lower()
    if not needle:
        return True
    haystack = " ".join(str(line.get(k) or "") for k in ("id", "name", "model")).lower()
    return needle in haystack


def unit_line(unit: UnitRow) -> dict[str, Any]:
    """A unit in a page of a task's strip: its key, state, attempt, kills and the last
    line of its error (the whole traceback is in its log)."""
    error = (unit.error or "").strip().splitlines()
    return {
        "unit": unit.key,
        "index": unit.index,
        "state": unit.state,
        "attempt": unit.attempt,
        "errors": unit.errors,
        "kills": unit.kills,
        "worker": unit.worker,
        "memory_gb": unit.memory_gb,
        "error": error[-1] if error else None,
    }
