"""Writing a batch of worker reports into the run store, inside the caller's transaction.

`RunStore.apply_reports` is this module's `apply_reports`; which report takes which path is
decided by `simrun.runstore.ingest` (no I/O there), what becomes of each unit by
`simrun.core.states.unit_after_outcome`.
"""

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
from simrun.runstore.reads import chunks, marks
from simrun.runstore.rows import UPDATE_UNIT, Applied, unit_of, unit_values
from simrun.runstore.schema import UNIT_COLUMNS, sql_list


async def apply_reports(
    conn: aiosqlite.Connection, entries: Sequence[ReportEntry], limits: Limits, now_s: float
) -> Applied:
    """Apply the unit outcomes of report entries on ``conn`` (in a transaction).

    A range job in flight that a report says is done whole becomes a span (no unit row is
    written); the range jobs of the other reports get their unit rows first. Then all-done
    reports are one set-based update each, the others go unit by unit; then the units of
    reported jobs that their report left out are released, those jobs leave the set in
    flight, and each task reported on gets its kills and peak.
    """
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
    """Rows for the chunk units ``indices`` (consecutive) of a task, each with the same
    ``values`` (columns of ``units``: ``state`` at least), made by SQLite (a recursive
    count), not as a list in Python."""
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
    are (queued, or running on its worker), and make them jobs of unit rows: what happens
    to them next (a release, a report that is not all done) is then written unit by unit.
    Jobs that are not range jobs in flight are left alone. Returns the rows made."""
    made = 0
    for job_id in sorted(set(job_ids)):
        rows = list(
            await conn.execute_fetchall(
                "SELECT run_id, task, first_idx, last_idx, attempt, memory_gb, worker, running,"
                " enqueued_s, started_s FROM jobs WHERE id = ? AND first_idx IS NOT NULL",
                (job_id,),
            )
        )
        if not rows:
            continue
        run, task, first, last, attempt, memory_gb, worker, running, queued_s, started_s = rows[0]
        before = conn.total_changes
        await insert_unit_rows(
            conn,
            run,
            task,
            range(first, last + 1),
            state="running" if running else "queued",
            attempt=attempt,
            job_id=job_id,
            memory_gb=memory_gb,
            worker=worker,
            queued_s=queued_s,
            started_s=started_s if running else None,
        )
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
    """Range jobs done whole: each becomes a span, its task counts its units done, and the
    job leaves the set in flight."""
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


async def _task_facts(
    conn: aiosqlite.Connection,
    entries: Sequence[ReportEntry],
    kills: Mapping[tuple[str, str], int],
) -> None:
    """Add the kills taken to their tasks, and raise their peaks to what was measured."""
    peaks: dict[tuple[str, str], float] = {}
    gpu_peaks: dict[tuple[str, str], float] = {}
    for entry in entries:
        task = (entry.run, entry.task)
        peak = observed_peak_gb(entry)
        if peak is not None:
            peaks[task] = max(peak, peaks.get(task, peak))
        gpu = entry.report.peak_gpu_memory_gb
        if gpu is not None:
            gpu_peaks[task] = max(gpu, gpu_peaks.get(task, gpu))
    params = [
        {
            "run": run,
            "task": task,
            "kills": kills.get((run, task), 0),
            "peak": peaks.get((run, task)),
            "gpu": gpu_peaks.get((run, task)),
        }
        for run, task in sorted(set(peaks) | set(kills) | set(gpu_peaks))
    ]
    if params:
        # max() of SQLite is NULL when an argument is: coalesce keeps whichever is known.
        await conn.executemany(
            "UPDATE tasks SET kills = kills + :kills,"
            " peak_memory_gb = coalesce(max(peak_memory_gb, :peak), peak_memory_gb, :peak),"
            " peak_gpu_memory_gb ="
            " coalesce(max(peak_gpu_memory_gb, :gpu), peak_gpu_memory_gb, :gpu)"
            " WHERE run_id = :run AND name = :task",
            params,
        )
    await _scratch_facts(conn, entries)


async def _scratch_facts(conn: aiosqlite.Connection, entries: Sequence[ReportEntry]) -> None:
    """Add what staging took to the tasks, and raise their scratch peaks to what was
    measured."""
    facts: dict[tuple[str, str], tuple[int, float, float | None]] = {}
    for entry in entries:
        r = entry.report
        if not r.staged_bytes and not r.staged_s and r.scratch_gb is None:
            continue
        key = (entry.run, entry.task)
        size, seconds, peak = facts.get(key, (0, 0.0, None))
        if r.scratch_gb is not None:
            peak = r.scratch_gb if peak is None else max(peak, r.scratch_gb)
        facts[key] = (size + r.staged_bytes, seconds + r.staged_s, peak)
    if facts:
        await conn.executemany(
            "UPDATE tasks SET staged_bytes = staged_bytes + :size,"
            " staged_s = staged_s + :seconds,"
            " scratch_peak_gb = coalesce(max(scratch_peak_gb, :peak), scratch_peak_gb, :peak)"
            " WHERE run_id = :run AND name = :task",
            [
                {"run": run, "task": task, "size": size, "seconds": seconds, "peak": peak}
                for (run, task), (size, seconds, peak) in sorted(facts.items())
            ],
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


async def _existing_jobs(
    conn: aiosqlite.Connection, job_ids: Sequence[str]
) -> dict[str, tuple[int | None, int | None]]:
    """The jobs of ``job_ids`` in flight, with their range (None, None for jobs whose units
    have rows)."""
    found: dict[str, tuple[int | None, int | None]] = {}
    for part in chunks(sorted(set(job_ids))):
        rows = await conn.execute_fetchall(
            f"SELECT id, first_idx, last_idx FROM jobs WHERE id IN ({marks(len(part))})", part
        )
        found.update({str(r[0]): (r[1], r[2]) for r in rows})
    return found
