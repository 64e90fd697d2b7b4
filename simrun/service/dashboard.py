"""What the web app's pages are made of (pure): a run's line in the runs list, the runs a
filter keeps, a page of a task's units."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from simrun.core.states import UnitRow
from simrun.core.views import RunView, running_seconds
from simrun.runstore.rows import span_units

#: The most units one page of a strip holds.
MAX_PAGE = 500


def run_line(view: RunView, now_s: float) -> dict[str, Any]:
    """A run's line in the runs list."""
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
    """Whether the runs list shows ``line`` for a state and a text in its id, name or model."""
    if state and line.get("state") != state:
        return False
    needle = (text or "").strip().lower()
    if not needle:
        return True
    haystack = " ".join(str(line.get(k) or "") for k in ("id", "name", "model")).lower()
    return needle in haystack


def unit_line(unit: UnitRow) -> dict[str, Any]:
    """A unit in a page of a task's strip (the last line of its error)."""
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


def page_of(units: Sequence[UnitRow], offset: int, limit: int) -> dict[str, Any]:
    """The page of ``units`` from ``offset`` (at most `MAX_PAGE`), with their total."""
    offset = max(0, offset)
    limit = max(1, min(limit, MAX_PAGE))
    return {
        "total": len(units),
        "offset": offset,
        "units": [unit_line(u) for u in units[offset : offset + limit]],
    }


def pending_page(
    rows: Sequence[UnitRow],
    fresh: range,
    total: int,
    where: tuple[str, str],
    offset: int,
    limit: int,
) -> dict[str, Any]:
    """The page of a task's pending units from ``offset`` without a listing of them all:
    the units sent back first (``rows``: at least the first ``offset + limit`` of them by
    index, all below the frontier; ``total - len(fresh)`` in all), then the ``fresh`` ones
    (never dispatched) made up from their range. ``where`` is (run, task)."""
    offset = max(0, offset)
    limit = max(1, min(limit, MAX_PAGE))
    sent_back = max(0, total - len(fresh))
    wanted = list(rows[offset : offset + limit])
    skip = max(0, offset - sent_back)
    wanted += [
        UnitRow(*where, i, "chunk", "pending") for i in fresh[skip : skip + limit - len(wanted)]
    ]
    return {"total": total, "offset": offset, "units": [unit_line(u) for u in wanted]}


def done_page(
    rows: Sequence[UnitRow], spans: Sequence[Sequence[Any]], offset: int, limit: int
) -> dict[str, Any]:
    """The page of a task's done units from ``offset``, by index, from the units with a
    row (``rows``) and the spans (``(run, task, first, last, ...)`` rows, whose units
    `simrun.runstore.rows.span_units` makes): only the spans the page reaches are made
    into units."""
    offset = max(0, offset)
    limit = max(1, min(limit, MAX_PAGE))
    parts: list[tuple[int, int, UnitRow | Sequence[Any]]] = [(u.index, 1, u) for u in rows]
    parts += [(int(s[2]), int(s[3]) - int(s[2]) + 1, s) for s in spans]
    parts.sort(key=lambda part: part[0])
    total = sum(size for _, size, _ in parts)
    wanted: list[UnitRow] = []
    seen = 0
    for _, size, part in parts:
        if len(wanted) >= limit:
            break
        if seen + size <= offset:
            seen += size
            continue
        units = [part] if isinstance(part, UnitRow) else span_units(part)
        skip = max(0, offset - seen)
        wanted += units[skip : skip + limit - len(wanted)]
        seen += size
    return {"total": total, "offset": offset, "units": [unit_line(u) for u in wanted]}
