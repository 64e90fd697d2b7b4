"""What the web app's pages are made of, decided without I/O: a run's line in the runs
list, the runs a filter keeps, the line of a unit (pages are `RunReads.unit_page`; the
Editor's forecast is `simrun.core.forecast`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
