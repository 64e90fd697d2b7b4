"""What the web app's pages are made of, decided without I/O: a run's line in the runs
list, the runs a filter keeps, a page of a task's units, and the forecast of a workflow
drawn up in the Editor on the live pool.

The routes (`simrun.service.routes`) read the stores and call these; the tests
check them as tables (``tests/unit/test_dashboard.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simrun.core.eta import TaskEta, learned_eta_s, run_eta_s
from simrun.core.sizing import WorkerCapacity, parallel_slots
from simrun.core.states import UnitRow
from simrun.core.views import RunView, running_seconds

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


@dataclass(frozen=True)
class PlanRow:
    """A task of the Editor's workflow as it would be dispatched."""

    name: str
    type: str
    splittable: bool
    units: int
    queue: str
    memory_per_worker_gb: float
    memory_base_gb: float
    gpus: int
    seconds_per_unit: float | None
    source: str
    depends: tuple[str, ...] = ()
    uses_cores: bool = False


def slots_on(row: PlanRow, pool: Sequence[WorkerCapacity]) -> int:
    """How many units of ``row`` the live pool runs at once (the dry run's rule,
    `simrun.core.sizing.parallel_slots`)."""
    return parallel_slots(
        "chunk" if row.splittable else "command",
        row.queue,
        row.memory_base_gb,
        row.memory_per_worker_gb,
        row.gpus,
        row.uses_cores,
        pool,
    )


def forecast_rows(rows: Sequence[PlanRow], pool: Sequence[WorkerCapacity]) -> dict[str, Any]:
    """The Editor's forecast table: per task its units, the memory a process is given and
    where that comes from, its core-hours and its ETA on ``pool``; the run's totals (the
    run's ETA by `simrun.core.eta.run_eta_s`). An unknown figure is None."""
    tasks = []
    etas = []
    for row in rows:
        slots = slots_on(row, pool)
        spu = row.seconds_per_unit
        eta = learned_eta_s(row.units, spu, slots)
        problem = None
        if slots == 0:
            problem = (
                f"no live worker of the {row.queue} queue fits a process of "
                f"{row.memory_per_worker_gb:g} GiB"
                if any(row.queue in w.queues for w in pool)
                else f"no live worker serves the {row.queue} queue"
            )
        tasks.append(
            {
                "task": row.name,
                "type": row.type,
                "units": row.units,
                "queue": row.queue,
                "memory_per_worker_gb": row.memory_per_worker_gb,
                "memory_source": row.source,
                "seconds_per_unit": spu,
                "core_hours": None if spu is None else row.units * spu / 3600,
                "slots": slots,
                "eta_s": eta,
                "problem": problem,
            }
        )
        etas.append(TaskEta(row.name, row.depends, row.queue, False, eta))
    hours = [t["core_hours"] for t in tasks]
    return {
        "tasks": tasks,
        "core_hours": None if any(h is None for h in hours) else sum(hours),
        "eta_s": run_eta_s(etas) if rows else 0.0,
        "pool": {
            "workers": len(pool),
            "processes": sum(w.processes for w in pool),
            "memory_gb": sum(w.memory_gb for w in pool),
        },
    }
