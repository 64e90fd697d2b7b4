"""Writing a batch of worker reports into the run store, inside the caller's transaction.

`RunStore.apply_reports` is this module's `apply_reports`; which report takes which path is
decided by `simrun.runstore.ingest` (no I/O there), what becomes of each unit by
`simrun.core.states.unit_after_outcome`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiosqlite

from simrun.core.reports import ReportEntry
from simrun.core.states import ACTIVE_UNIT_STATES, Limits, UnitRow, unit_after_outcome, unit_index
from simrun.runstore.ingest import index_ranges, observed_peak_gb, split_reports
from simrun.runstore.reads import chunks, marks
from simrun.runstore.rows import UPDATE_UNIT, Applied, unit_of, unit_values
from simrun.runstore.schema import UNIT_COLUMNS, sql_list

__all__ = ["apply_reports"]


async def apply_reports(
    conn: aiosqlite.Connection, entries: Sequence[ReportEntry], limits: Limits, now_s: float
) -> Applied:
    """Apply the unit outcomes of report entries on ``conn`` (in a transaction).

    All-done reports are one set-based update each, the others go unit by unit; then the
    units of reported jobs that their report left out are released, those jobs leave the
    set in flight, and each task reported on gets its kills and peak.
    """
    applied = Applied()
    in_flight = await _existing_jobs(conn, [e.job_id for e in entries])
    recorded: set[str] = set()
    for entry in entries:
        if entry.job_id in in_flight and entry.job_id not in recorded:
            recorded.add(entry.job_id)
            applied.recorded.append(entry)
    fast, slow = split_reports(entries)
    await _apply_done(conn, fast, now_s, applied)
    kills = await _apply_by_unit(conn, slow, limits, now_s, applied)
    await _task_facts(conn, entries, kills)
    gone = sorted(in_flight)
    before = conn.total_changes
    await conn.executemany(
        "UPDATE units SET state = 'pending', worker = NULL,"
        " error = 'the report of its job did not mention it'"
        f" WHERE job_id = ? AND state IN {sql_list(ACTIVE_UNIT_STATES)}",
        [(j,) for j in gone],
    )
    await conn.executemany("DELETE FROM jobs WHERE id = ?", [(j,) for j in gone])
    applied.changed += conn.total_changes - before - len(gone)
    return applied


async def _apply_done(
    conn: aiosqlite.Connection, entries: Sequence[ReportEntry], now_s: float, applied: Applied
) -> None:
    """All-done reports: per task one batch of range updates, in the reports' order (the
    first report to finish a unit gives its worker and start time, as unit by unit). A
    unit queued or running under another attempt is left to that attempt, as
    `unit_after_outcome` does."""
    by_task: dict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
    for entry in entries:
        by_task[(entry.run, entry.task)] += [
            (
                entry.worker_id,
                entry.started,
                now_s,
                entry.run,
                entry.task,
                first,
                last,
                entry.attempt,
            )
            for first, last in index_ranges(unit_index(k) for k in entry.outcomes)
        ]
    for task, params in by_task.items():
        before = conn.total_changes
        await conn.executemany(
            "UPDATE units SET state = 'done', worker = ?, error = NULL,"
            " started_s = coalesce(started_s, ?), finished_s = ?"
            " WHERE run_id = ? AND task = ? AND idx BETWEEN ? AND ? AND state != 'done'"
            f" AND NOT (state IN {sql_list(ACTIVE_UNIT_STATES)} AND attempt != ?)",
            params,
        )
        if conn.total_changes > before:
            applied.changed += conn.total_changes - before
            applied.touched.add(task)


async def _apply_by_unit(
    conn: aiosqlite.Connection,
    entries: Sequence[ReportEntry],
    limits: Limits,
    now_s: float,
    applied: Applied,
) -> dict[tuple[str, str], int]:
    """The other reports, unit by unit; returns the kills for memory taken per task."""
    wanted: list[tuple[str, str, int]] = []
    for entry in entries:
        wanted += [(entry.run, entry.task, unit_index(k)) for k in entry.outcomes]
    units = await _unit_rows(conn, wanted) if wanted else {}
    changed: dict[tuple[str, str, int], UnitRow] = {}
    kills: dict[tuple[str, str], int] = defaultdict(int)
    for entry in entries:
        for key, outcome in entry.outcomes.items():
            ident = (entry.run, entry.task, unit_index(key))
            unit = changed.get(ident) or units.get(ident)
            if unit is None:
                continue
            after = unit_after_outcome(
                unit,
                outcome,
                entry.attempt,
                error=entry.errors.get(key) or entry.error,
                worker=entry.worker_id,
                limit_gb=entry.report.limit_gb,
                limits=limits,
                now_s=now_s,
                started_s=entry.started,
            )
            if after is None:
                continue
            changed[ident] = after
            applied.touched.add((entry.run, entry.task))
            if outcome == "killed":
                kills[(entry.run, entry.task)] += 1
            if outcome == "refused":
                applied.refused[(entry.run, entry.task)] = after.error or "refused"
    if changed:
        await conn.executemany(UPDATE_UNIT, [unit_values(u) for u in changed.values()])
    applied.changed += len(changed)
    return kills


async def _task_facts(
    conn: aiosqlite.Connection,
    entries: Sequence[ReportEntry],
    kills: Mapping[tuple[str, str], int],
) -> None:
    """Add the kills taken to their tasks, and raise their peaks to what was measured."""
    peaks: dict[tuple[str, str], float] = {}
    for entry in entries:
        peak = observed_peak_gb(entry)
        if peak is not None:
            task = (entry.run, entry.task)
            peaks[task] = max(peak, peaks.get(task, peak))
    params = [
        {
            "run": run,
            "task": task,
            "kills": kills.get((run, task), 0),
            "peak": peaks.get((run, task)),
        }
        for run, task in sorted(set(peaks) | set(kills))
    ]
    if params:
        # max() of SQLite is NULL when an argument is: coalesce keeps whichever is known.
        await conn.executemany(
            "UPDATE tasks SET kills = kills + :kills,"
            " peak_memory_gb = coalesce(max(peak_memory_gb, :peak), peak_memory_gb, :peak)"
            " WHERE run_id = :run AND name = :task",
            params,
        )


async def _unit_rows(
    conn: aiosqlite.Connection, wanted: Iterable[tuple[str, str, int]]
) -> dict[tuple[str, str, int], UnitRow]:
    by_task: dict[tuple[str, str], list[int]] = defaultdict(list)
    for run_id, task, index in wanted:
        by_task[(run_id, task)].append(index)
    found: dict[tuple[str, str, int], UnitRow] = {}
    for (run_id, task), indices in by_task.items():
        for part in chunks(sorted(set(indices))):
            rows = await conn.execute_fetchall(
                f"SELECT {UNIT_COLUMNS} FROM units WHERE run_id = ? AND task = ?"
                f" AND idx IN ({marks(len(part))})",
                (run_id, task, *part),
            )
            for r in rows:
                unit = unit_of(r)
                found[(unit.run, unit.task, unit.index)] = unit
    return found


async def _existing_jobs(conn: aiosqlite.Connection, job_ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for part in chunks(sorted(set(job_ids))):
        rows = await conn.execute_fetchall(
            f"SELECT id FROM jobs WHERE id IN ({marks(len(part))})", part
        )
        found.update(str(r[0]) for r in rows)
    return found
