"""Writing a batch of worker reports into the run store, inside the caller's transaction
(the path of each report: `simrun.runstore.ingest`; what becomes of a unit:
`simrun.core.states.unit_after_outcome`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiosqlite

from simrun.core.ranges import Ranges
from simrun.core.reports import ReportEntry
from simrun.core.states import (
    ACTIVE_UNIT_STATES,
    Limits,
    RetryRule,
    UnitRow,
    unit_after_outcome,
    unit_index,
)
from simrun.runstore.ingest import all_done, observed_peak_gb, split_reports
from simrun.runstore.reads import in_chunks
from simrun.runstore.rows import (
    JOB_COLUMNS,
    UNIT_COLUMNS,
    UPDATE_UNIT,
    Applied,
    job_of,
    job_range,
    unit_of,
    unit_values,
)
from simrun.runstore.schema import sql_list


async def apply_reports(
    conn: aiosqlite.Connection, entries: Sequence[ReportEntry], limits: Limits, now_s: float
) -> Applied:
    """Apply the unit outcomes of report entries on ``conn`` (in a transaction): a range job
    done whole becomes a span, other range jobs get unit rows first; units a report left
    out are released, the jobs reported on leave the set in flight."""
    applied = Applied()
    in_flight = await _existing_jobs(conn, [e.job_id for e in entries])
    recorded: set[str] = set()
    for entry in entries:
        if entry.job_id in in_flight and entry.job_id not in recorded:
            recorded.add(entry.job_id)
            applied.recorded.append(entry)
    spans: dict[str, ReportEntry] = {}
    for entry in entries:
        job = in_flight.get(entry.job_id)
        if job is not None and entry.job_id not in spans and done_whole(entry, job):
            spans[entry.job_id] = entry
    rest = [e for e in entries if e.job_id not in spans]
    await materialize_jobs(
        conn, [e.job_id for e in rest if (j := in_flight.get(e.job_id)) and j[0] is not None]
    )
    await _apply_spans(conn, spans, in_flight, now_s, applied)
    fast, slow = split_reports(rest)
    await _apply_done(conn, fast, now_s, applied)
    kills = await _apply_by_unit(conn, slow, limits, now_s, applied)
    await _task_facts(conn, entries, kills)
    gone = sorted(set(in_flight) - set(spans))
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


def done_whole(entry: ReportEntry, job: tuple[int | None, int | None]) -> bool:
    """Whether a report says every unit of its range job ``(first, last)`` is done, and
    names no other unit."""
    first, last = job
    if first is None or last is None or not all_done(entry):
        return False
    indices = [k for k in entry.outcomes if isinstance(k, int)]
    if len(indices) != len(entry.outcomes) or len(indices) != last - first + 1:
        return False
    return min(indices) == first and max(indices) == last


async def insert_unit_rows(
    conn: aiosqlite.Connection, run: str, task: str, indices: range, **values: Any
) -> None:
    """Rows for the chunk units ``indices`` of a task, each with the same ``values``
    (columns of ``units``), made by SQLite (a recursive count), not in Python."""
    if not indices:
        return
    columns = ", ".join(values)
    params = ", ".join(f":{c}" for c in values)
    await conn.execute(
        "WITH RECURSIVE seq(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM seq WHERE i < :last)"
        f" INSERT INTO units (run_id, task, idx, kind, {columns})"
        f" SELECT :run, :task, i, 'chunk', {params} FROM seq",
        {**values, "first": indices[0], "last": indices[-1], "run": run, "task": task},
    )


async def materialize_jobs(conn: aiosqlite.Connection, job_ids: Iterable[str]) -> int:
    """Give the units of these range jobs in flight rows of their own, as the job says they
    are, to be written unit by unit from then on; returns the rows made."""
    made = 0
    for job_id in sorted(set(job_ids)):
        rows = await conn.execute_fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ? AND first_idx IS NOT NULL", (job_id,)
        )
        for row in rows:
            job = job_of(row)
            part = job_range(job)
            values = {k: v for k, v in part.fields.items() if k not in ("run", "task", "kind")}
            before = conn.total_changes
            await insert_unit_rows(conn, job.run, job.task, part.indices, **values)
            made += conn.total_changes - before
            await conn.execute(
                "UPDATE jobs SET first_idx = NULL, last_idx = NULL WHERE id = ?", (job_id,)
            )
    return made


async def _apply_spans(
    conn: aiosqlite.Connection,
    spans: Mapping[str, ReportEntry],
    in_flight: Mapping[str, tuple[int | None, int | None]],
    now_s: float,
    applied: Applied,
) -> None:
    """Range jobs done whole: each becomes a span and leaves the set in flight."""
    done: dict[tuple[str, str], int] = defaultdict(int)
    for job_id, entry in spans.items():
        first, last = in_flight[job_id]
        assert first is not None
        assert last is not None
        await conn.execute(
            "INSERT INTO spans (run_id, task, first_idx, last_idx, attempt, job_id, memory_gb,"
            " worker, queued_s, started_s, finished_s)"
            " SELECT run_id, task, first_idx, last_idx, attempt, id, memory_gb, ?,"
            " enqueued_s, coalesce(started_s, ?), ? FROM jobs WHERE id = ?",
            (entry.worker_id, entry.started, now_s, job_id),
        )
        await conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        done[(entry.run, entry.task)] += last - first + 1
    for (run, task), n in sorted(done.items()):
        await conn.execute(
            "UPDATE tasks SET spans_done = spans_done + ? WHERE run_id = ? AND name = ?",
            (n, run, task),
        )
        applied.changed += n
        applied.touched.add((run, task))


async def _apply_done(
    conn: aiosqlite.Connection, entries: Sequence[ReportEntry], now_s: float, applied: Applied
) -> None:
    """All-done reports: per task one batch of range updates, in the reports' order; a unit
    in flight under another attempt is left to it, as `unit_after_outcome` does."""
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
            for first, last in Ranges.of_indices(unit_index(k) for k in entry.outcomes).pairs
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
    rules = await _retry_rules(conn, {(e.run, e.task) for e in entries})
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
                rule=rules.get((entry.run, entry.task)),
                exceptions=entry.exceptions.get(key, ()),
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


async def _retry_rules(
    conn: aiosqlite.Connection, tasks: set[tuple[str, str]]
) -> dict[tuple[str, str], RetryRule]:
    """The retry rule of each of these tasks that has one of its own."""
    rules: dict[tuple[str, str], RetryRule] = {}
    for run, task in tasks:
        async with conn.execute(
            "SELECT retry FROM tasks WHERE run_id = ? AND name = ? AND retry IS NOT NULL",
            (run, task),
        ) as cursor:
            row = await cursor.fetchone()
        if row is not None:
            rules[(run, task)] = RetryRule.of(json.loads(row[0]))
    return rules


def raised(column: str, param: str) -> str:
    """SQL setting ``column`` to the larger of it and ``:param``, whichever is known (max()
    of SQLite is NULL when an argument is)."""
    return f"{column} = coalesce(max({column}, :{param}), {column}, :{param})"


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


async def _task_facts(
    conn: aiosqlite.Connection,
    entries: Sequence[ReportEntry],
    kills: Mapping[tuple[str, str], int],
) -> None:
    """Add the kills and the staging the reports tell to their tasks, and raise their peaks
    of memory, GPU memory and scratch to what was measured."""
    facts: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in entries:
        r = entry.report
        key = (entry.run, entry.task)
        f = facts.setdefault(key, {"run": entry.run, "task": entry.task, "size": 0, "seconds": 0.0})
        f["kills"] = kills.get(key, 0)
        f["peak"] = _most(f.get("peak"), observed_peak_gb(entry))
        f["gpu"] = _most(f.get("gpu"), r.peak_gpu_memory_gb)
        f["scratch"] = _most(f.get("scratch"), r.scratch_gb)
        f["size"] += r.staged_bytes
        f["seconds"] += r.staged_s
    await conn.executemany(
        "UPDATE tasks SET kills = kills + :kills, staged_bytes = staged_bytes + :size,"
        f" staged_s = staged_s + :seconds, {raised('peak_memory_gb', 'peak')},"
        f" {raised('peak_gpu_memory_gb', 'gpu')}, {raised('scratch_peak_gb', 'scratch')}"
        " WHERE run_id = :run AND name = :task",
        [facts[key] for key in sorted(facts)],
    )


async def _unit_rows(
    conn: aiosqlite.Connection, wanted: Iterable[tuple[str, str, int]]
) -> dict[tuple[str, str, int], UnitRow]:
    by_task: dict[tuple[str, str], list[int]] = defaultdict(list)
    for run_id, task, index in wanted:
        by_task[(run_id, task)].append(index)
    found: dict[tuple[str, str, int], UnitRow] = {}
    sql = f"SELECT {UNIT_COLUMNS} FROM units WHERE run_id = ? AND task = ? AND idx IN (?*)"
    for (run_id, task), indices in by_task.items():
        for row in await in_chunks(
            conn.execute_fetchall, sql, sorted(set(indices)), (run_id, task)
        ):
            unit = unit_of(row)
            found[(unit.run, unit.task, unit.index)] = unit
    return found


async def _existing_jobs(
    conn: aiosqlite.Connection, job_ids: Sequence[str]
) -> dict[str, tuple[int | None, int | None]]:
    """The jobs of ``job_ids`` in flight, with their range (None, None for jobs whose units
    have rows)."""
    sql = "SELECT id, first_idx, last_idx FROM jobs WHERE id IN (?*)"
    rows = await in_chunks(conn.execute_fetchall, sql, sorted(set(job_ids)))
    return {str(r[0]): (r[1], r[2]) for r in rows}
