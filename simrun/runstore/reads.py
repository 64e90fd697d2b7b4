"""The read side of the run store, on a connection of its own: WAL lets it see the last
committed state while the writer works, so the HTTP API never waits for a report batch."""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from simrun import db
from simrun.core.layout import StoreLayout
from simrun.core.ranges import Ranges
from simrun.core.reuse import Earlier, UnitsEarlier
from simrun.core.states import (
    FINISHED_TASK_STATES,
    UNIT_STATES,
    TaskCounts,
    UnitKind,
    UnitRow,
    UnitState,
)
from simrun.runstore.rows import (
    JOB_COLUMNS,
    RUN_COLUMNS,
    TASK_COLUMNS,
    UNIT_COLUMNS,
    JobRow,
    RunRow,
    TaskRow,
    UnitRange,
    counts_of,
    fresh_range,
    job_of,
    job_range,
    run_of,
    span_range,
    task_of,
    unit_of,
)
from simrun.runstore.schema import SPAN_COLUMNS, sql_list

#: Not a state: the units killed for memory at least once (`RunReads.unit_page`).
KILLED = "killed"

#: Most host parameters in one statement, well below SQLite's limit.
BATCH = 500


def chunks(items: Sequence[Any], size: int = BATCH) -> list[Sequence[Any]]:
    """``items`` in slices of at most ``size``."""
    return [items[start : start + size] for start in range(0, len(items), size)]


def marks(n: int) -> str:
    """``?, ?, …`` for ``n`` parameters."""
    return ", ".join("?" * n)


async def in_chunks(
    fetch: Callable[[str, Sequence[Any]], Awaitable[Iterable[Any]]],
    sql: str,
    keys: Iterable[Any],
    before: Sequence[Any] = (),
) -> list[Any]:
    """The rows of ``sql`` for ``keys``, fetched in chunks: its ``(?*)`` takes the keys of
    one, after the parameters ``before``."""
    found: list[Any] = []
    for part in chunks(list(keys)):
        found += await fetch(sql.replace("(?*)", f"({marks(len(part))})"), (*before, *part))
    return found


@dataclass(frozen=True)
class DoneTask:
    """A done task of some run with a given fingerprint (`simrun.core.reuse`)."""

    fingerprint: str
    run: str
    task: str
    finished_s: float


def earlier_tasks(layout: StoreLayout, done: Sequence[DoneTask]) -> list[Earlier]:
    """Each of ``done`` as an `Earlier`, present when its out directory is (blocking I/O)."""
    return [Earlier(d.run, d.finished_s, layout.task_out(d.run, d.task).is_dir()) for d in done]


_DONE_SQL = (
    "SELECT fingerprint, run_id, name, finished_s FROM tasks"
    " WHERE state = 'done' AND fingerprint IN (?*) AND finished_s IS NOT NULL"
    " ORDER BY finished_s DESC"
)


@dataclass(frozen=True)
class DoneUnits:
    """A finished splittable task of some run with a given unit fingerprint (done, failed
    or cancelled), and its units (`simrun.core.reuse`, reuse per unit)."""

    unit_fingerprint: str
    run: str
    task: str
    finished_s: float
    units: int
    state: str

    def earlier(self) -> UnitsEarlier:
        """What reuse weighs of it (not done: only its done units may be taken)."""
        return UnitsEarlier(self.run, self.task, self.finished_s, self.units, self.state == "done")


_DONE_UNITS_SQL = (
    "SELECT unit_fingerprint, run_id, name, finished_s, units, state FROM tasks"
    f" WHERE state IN {sql_list(FINISHED_TASK_STATES)} AND unit_fingerprint IN (?*)"
    " AND finished_s IS NOT NULL AND units IS NOT NULL ORDER BY finished_s DESC"
)


#: The done chunk units of a task (``?`` twice: run and task): rows and spans, as ranges.
DONE_RANGES_SQL = (
    "SELECT idx, idx FROM units WHERE run_id = ? AND task = ? AND kind = 'chunk'"
    " AND state = 'done'"
    " UNION ALL SELECT first_idx, last_idx FROM spans WHERE run_id = ? AND task = ?"
)


#: The last time anything of a run (``?`` four times) was recorded.
LAST_ACTIVITY_SQL = (
    "SELECT max(t) FROM ("
    " SELECT max(finished_s) AS t FROM units WHERE run_id = ?"
    " UNION ALL SELECT max(finished_s) FROM spans WHERE run_id = ?"
    " UNION ALL SELECT max(max(coalesce(started_s, 0), coalesce(finished_s, 0)))"
    "  FROM tasks WHERE run_id = ?"
    " UNION ALL SELECT updated_s FROM runs WHERE id = ?)"
)


class RunReads:
    """Queries of run state; `simrun.runstore.RunStore` adds the writes."""

    path: Path

    def __init__(self) -> None:
        self._read: aiosqlite.Connection | None = None
        self._read_lock = asyncio.Lock()
        #: Running runs this process leaves alone (an embedded session's interrupted ones).
        self.held: frozenset[str] = frozenset()

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        if self._read is None:
            raise RuntimeError(f"RunStore({self.path}) is closed or was never opened")
        async with self._read_lock:
            return list(await self._read.execute_fetchall(sql, params))

    async def run(self, run_id: str) -> RunRow | None:
        rows = await self._fetch(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return (await self._with_pauses([run_of(rows[0])]))[0] if rows else None

    async def last_activity_s(self, run_id: str) -> float | None:
        """The last time anything of ``run_id`` was recorded: when a session that was killed
        stopped it, near enough. None for an unknown run."""
        rows = await self._fetch(LAST_ACTIVITY_SQL, (run_id,) * 4)
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    async def _with_pauses(self, runs: list[RunRow]) -> list[RunRow]:
        """``runs`` with their `RunRow.pauses`."""
        if not runs:
            return runs
        found: dict[str, list[tuple[float, float | None]]] = {}
        sql = "SELECT run_id, stopped_s, resumed_s FROM pauses WHERE run_id IN (?*)"
        sql += " ORDER BY stopped_s"
        for run_id, stopped, resumed in await in_chunks(self._fetch, sql, [r.id for r in runs]):
            found.setdefault(run_id, []).append((stopped, resumed))
        return [
            dataclasses.replace(r, pauses=tuple(found[r.id])) if r.id in found else r for r in runs
        ]

    async def runs(self, limit: int = 100, states: Sequence[str] = ()) -> list[RunRow]:
        """The latest runs first, optionally only those in ``states``."""
        where = f"WHERE state IN ({marks(len(states))})" if states else ""
        rows = await self._fetch(
            f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY created_s DESC, id DESC LIMIT ?",
            (*states, limit),
        )
        return await self._with_pauses([run_of(r) for r in rows])

    async def running_runs(self) -> list[RunRow]:
        """Every run in state running but the `held` ones, the latest first."""
        rows = await self._fetch(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE state = 'running'"
            " ORDER BY created_s DESC, id DESC"
        )
        return [run for run in map(run_of, rows) if run.id not in self.held]

    async def done_tasks(self, fingerprints: Sequence[str], other_than: str) -> list[DoneTask]:
        """The done tasks with one of ``fingerprints`` of runs other than ``other_than``,
        latest first."""
        return [DoneTask(*r) for r in await self._finished(_DONE_SQL, fingerprints, other_than)]

    async def done_units(self, unit_prints: Sequence[str], other_than: str) -> list[DoneUnits]:
        """The finished tasks with one of ``unit_prints`` of runs other than
        ``other_than``, latest first (reuse per unit)."""
        found = await self._finished(_DONE_UNITS_SQL, unit_prints, other_than)
        return [DoneUnits(*r) for r in found]

    async def _finished(self, sql: str, keys: Sequence[str], other_than: str) -> list[Any]:
        return [r for r in await in_chunks(self._fetch, sql, keys) if r[1] != other_than]

    async def done_ranges(self, run_id: str, task: str) -> list[range]:
        """The done chunk units of a task (rows and spans), as sorted, disjoint ranges."""
        rows = await self._fetch(DONE_RANGES_SQL, (run_id, task) * 2)
        return list(Ranges.of(range(int(a), int(b) + 1) for a, b in rows).parts)

    async def tasks(self, run_id: str) -> list[TaskRow]:
        """The tasks of a run in topological order."""
        rows = await self._fetch(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY position", (run_id,)
        )
        return [task_of(r) for r in rows]

    async def counts(self, run_id: str) -> dict[str, TaskCounts]:
        """Units by state of every task of a run that has units, from the unit rows, the
        range jobs in flight and each task's counters (never a scan of every unit)."""
        rows = await self._fetch(
            "SELECT task, kind, state, count(*) FROM units WHERE run_id = ?"
            " GROUP BY task, kind, state",
            (run_id,),
        )
        ranged = await self._fetch(
            "SELECT task, CASE running WHEN 1 THEN 'running' ELSE 'queued' END,"
            " sum(last_idx - first_idx + 1) FROM jobs"
            " WHERE run_id = ? AND first_idx IS NOT NULL GROUP BY task, running",
            (run_id,),
        )
        tasks = await self._fetch(
            "SELECT name, units - frontier, spans_done FROM tasks"
            " WHERE run_id = ? AND splittable = 1 AND units IS NOT NULL"
            " AND (units > frontier OR spans_done > 0)",
            (run_id,),
        )
        extra: list[tuple[str, str, str, int]] = [
            (str(t), "chunk", str(state), int(n)) for t, state, n in ranged
        ]
        for name, fresh, spans_done in tasks:
            extra += [(str(name), "chunk", "pending", int(fresh))]
            extra += [(str(name), "chunk", "done", int(spans_done))]
        return counts_of([*rows, *extra])

    async def pending_rows(
        self,
        run_id: str,
        task: str,
        limit: int,
        kind: UnitKind | None = None,
        now_s: float | None = None,
    ) -> list[UnitRow]:
        """Up to ``limit`` pending units of a task that have a row, by index; with ``now_s``,
        only those whose retry may go now (a unit waiting for its delay holds none back)."""
        kind_clause = "AND kind = ?" if kind is not None else ""
        time_clause = "AND (not_before_s IS NULL OR not_before_s <= ?)" if now_s is not None else ""
        rows = await self._fetch(
            f"SELECT {UNIT_COLUMNS} FROM units INDEXED BY units_pending"
            f" WHERE run_id = ? AND task = ? AND state = 'pending' {kind_clause} {time_clause}"
            " ORDER BY idx LIMIT ?",
            (run_id, task, *((kind,) if kind else ()), *(() if now_s is None else (now_s,)), limit),
        )
        return [unit_of(r) for r in rows]

    async def fresh_units(self, run_id: str, task: str) -> range:
        """The chunk units of a task never dispatched: from its frontier on."""
        rows = await self._fetch(
            "SELECT frontier, coalesce(units, 0) FROM tasks"
            " WHERE run_id = ? AND name = ? AND splittable = 1",
            (run_id, task),
        )
        if not rows:
            return range(0)
        return range(int(rows[0][0]), max(int(rows[0][0]), int(rows[0][1])))

    async def units(
        self, run_id: str, task: str | None = None, states: Sequence[UnitState] = ()
    ) -> list[UnitRow]:
        """The units of a run (or one task), optionally only those in ``states``, by task
        and index. A listing is as large as the run: the service asks for the few states
        it needs, and pages (`unit_page`) for the others."""
        sql = f"SELECT {UNIT_COLUMNS} FROM units WHERE run_id = ?"
        params: list[Any] = [run_id]
        if task is not None:
            sql += " AND task = ?"
            params.append(task)
        if states:
            sql += f" AND state IN ({marks(len(states))})"
            params += states
        out = [unit_of(r) for r in await self._fetch(sql, params)]
        for part in await self._unit_ranges(run_id, task, set(states or UNIT_STATES)):
            out += [part.unit(i) for i in part.indices]
        out.sort(key=lambda u: (u.task, u.index))
        return out

    async def unit_page(
        self, run_id: str, task: str, state: str, offset: int, limit: int
    ) -> tuple[int, list[UnitRow]]:
        """The total of a task's units in ``state`` (or killed for memory at least once:
        `KILLED`) and the page of ``limit`` of them from position ``offset`` by index: the
        units without a row are made for the page only."""
        where, params = (
            ("kills > 0", (run_id, task))
            if state == KILLED
            else ("state = ?", (run_id, task, state))
        )
        sql = f"FROM units WHERE run_id = ? AND task = ? AND {where}"
        own = Ranges.of_indices(int(i) for (i,) in await self._fetch(f"SELECT idx {sql}", params))
        ranged = [] if state == KILLED else await self._unit_ranges(run_id, task, {state})
        ranged.sort(key=lambda part: part.indices.start)
        found = own | Ranges.of(part.indices for part in ranged)
        page = found.page(offset, limit)
        if not page:
            return found.count, []
        first, last = page.parts[0].start, page.parts[-1].stop - 1
        rows = await self._fetch(
            f"SELECT {UNIT_COLUMNS} {sql} AND idx BETWEEN ? AND ?", (*params, first, last)
        )
        with_row = {u.index: u for u in map(unit_of, rows)}
        starts = [part.indices.start for part in ranged]
        return found.count, [
            with_row[i] if i in with_row else ranged[bisect.bisect_right(starts, i) - 1].unit(i)
            for i in page
        ]

    async def _unit_ranges(
        self, run_id: str, task: str | None, states: set[str]
    ) -> list[UnitRange]:
        """The units of a run (or one task) in ``states`` that have no row: those of its
        range jobs in flight, its spans and past its frontier."""
        scope, params = ("AND task = ?", (run_id, task)) if task is not None else ("", (run_id,))
        out: list[UnitRange] = []
        if states & {"queued", "running"}:
            jobs = await self._fetch(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE run_id = ? {scope}"
                " AND first_idx IS NOT NULL",
                params,
            )
            ranged = [job_range(job_of(r)) for r in jobs]
            out += [part for part in ranged if part.fields["state"] in states]
        if "done" in states:
            spans = await self._fetch(
                f"SELECT {SPAN_COLUMNS} FROM spans WHERE run_id = ? {scope}", params
            )
            out += map(span_range, spans)
        if "pending" in states:
            name_scope = scope.replace("task", "name")
            rows = await self._fetch(
                "SELECT name, frontier, units FROM tasks WHERE run_id = ? AND splittable = 1"
                f" AND units > frontier {name_scope}",
                params,
            )
            out += [fresh_range(run_id, str(n), range(int(f), int(u))) for n, f, u in rows]
        return out

    async def jobs(self, run_id: str | None = None) -> list[JobRow]:
        """The jobs in flight (of one run, or all)."""
        where, params = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        rows = await self._fetch(
            f"SELECT {JOB_COLUMNS} FROM jobs {where} ORDER BY enqueued_s, id", params
        )
        return [job_of(r) for r in rows]

    async def jobs_in_flight(self) -> dict[str, int]:
        """Number of jobs in flight per logical queue."""
        rows = await self._fetch("SELECT queue, count(*) FROM jobs GROUP BY queue")
        return {str(q): int(n) for q, n in rows}

    async def failures(self, run_id: str) -> list[UnitRow]:
        """The failed units of a run with their last error, by task and index."""
        return await self.units(run_id, states=("failed",))

    async def pending_counts(self, run_id: str) -> dict[str, dict[str, int]]:
        """Pending units of a run per task and kind: the unit rows (a partial index holds
        only pending ones) and each task's fresh units (a counter)."""
        rows = await self._fetch(
            "SELECT task, kind, count(*) FROM units INDEXED BY units_pending"
            " WHERE run_id = ? AND state = 'pending' GROUP BY task, kind",
            (run_id,),
        )
        out: dict[str, dict[str, int]] = {}
        for task, kind, n in rows:
            out.setdefault(str(task), {})[str(kind)] = int(n)
        fresh = await self._fetch(
            "SELECT name, units - frontier FROM tasks WHERE run_id = ? AND splittable = 1"
            " AND units > frontier",
            (run_id,),
        )
        for task, n in fresh:
            by_kind = out.setdefault(str(task), {})
            by_kind["chunk"] = by_kind.get("chunk", 0) + int(n)
        return out


@asynccontextmanager
async def reads_of_file(path: Path) -> AsyncIterator[RunReads]:
    """The reads of the store file ``path``, which is neither migrated nor written (the dry
    run's forecasts)."""
    reads = RunReads()
    reads.path, reads._read = path, await db.connect(path)
    try:
        yield reads
    finally:
        await reads._read.close()


async def done_in_file(path: Path, fingerprints: Sequence[str]) -> list[DoneTask]:
    """`RunReads.done_tasks` in the store file ``path``; none without the file."""
    if not fingerprints or not await asyncio.to_thread(path.is_file):
        return []
    async with reads_of_file(path) as reads:
        return await reads.done_tasks(fingerprints, other_than="")


async def done_units_in_file(path: Path, unit_prints: Sequence[str]) -> list[DoneUnits]:
    """`RunReads.done_units` in the store file ``path``; none without the file."""
    if not unit_prints or not await asyncio.to_thread(path.is_file):
        return []
    async with reads_of_file(path) as reads:
        return await reads.done_units(unit_prints, other_than="")


async def done_ranges_in_file(path: Path, run_id: str, task: str) -> list[range]:
    """`RunReads.done_ranges` in the store file ``path``."""
    async with reads_of_file(path) as reads:
        return await reads.done_ranges(run_id, task)
