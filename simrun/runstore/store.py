"""`RunStore`: the SQL of run state (see the package's description)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from simrun import db
from simrun.core.reports import ReportEntry
from simrun.core.reuse import unit_start
from simrun.core.states import (
    ACTIVE_TASK_STATES,
    ACTIVE_UNIT_STATES,
    COMMAND_INDEX,
    FINISHED_TASK_STATES,
    MERGE_INDEX,
    NOT_STARTED_TASK_STATES,
    Limits,
    RunState,
    TaskPhase,
    TaskState,
    UnitRow,
)
from simrun.graph import downstream
from simrun.runstore.apply import apply_reports as write_reports
from simrun.runstore.apply import insert_unit_rows, materialize_jobs, raised
from simrun.runstore.reads import LAST_ACTIVITY_SQL, RunReads
from simrun.runstore.rows import (
    Applied,
    NewJob,
    NewRun,
    RunRow,
    RunStateError,
    TaskRow,
    UnknownRunError,
    dumps,
    insert,
    job_values,
    run_values,
    task_values,
)
from simrun.runstore.schema import COMPONENT, MIGRATIONS, sql_list


class RunStore(RunReads):
    """Run state in the SQLite file ``path`` (created on `open`)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._write: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> RunStore:
        """The store of ``path``, its tables created or upgraded. `db.DamagedDatabase` when
        the file is there but empty, not a database, or damaged (`db.connect` checks it)."""
        store = cls(path)
        store._write = await db.connect(store.path)
        try:
            await db.migrate(store._write, COMPONENT, MIGRATIONS)
            store._read = await db.connect(store.path)
        except aiosqlite.Error as exc:
            await store.close()
            found = db.damage_of(store.path, exc)
            if found is None:
                raise
            raise found from None
        except BaseException:
            await store.close()
            raise
        return store

    async def close(self) -> None:
        for conn in (self._write, self._read):
            if conn is not None:
                await conn.close()
        self._write = self._read = None

    async def __aenter__(self) -> RunStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connection(self) -> aiosqlite.Connection:
        """The write connection (for the schema of stores sharing the file)."""
        if self._write is None:
            raise RuntimeError(f"RunStore({self.path}) is closed or was never opened")
        return self._write

    async def checkpoint(self) -> None:
        """Copy the WAL into the file and empty it, as far as readers allow (a run that
        ended leaves the file small); the write connection cuts the WAL file back (see
        `simrun.db`)."""
        async with self._write_lock:
            await self.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """A write transaction on the store's connection, alone; pass the connection to the
        methods that take ``conn``."""
        async with self._write_lock, db.transaction(self.connection) as conn:
            yield conn

    @asynccontextmanager
    async def _writing(self, conn: aiosqlite.Connection | None) -> AsyncIterator[Any]:
        """``conn`` when the caller holds a transaction, else a new one of our own."""
        if conn is not None:
            if not conn.in_transaction:
                raise RuntimeError("RunStore: the connection passed is not in a transaction")
            yield conn
            return
        async with self.transaction() as own:
            yield own

    async def create_run(self, run: NewRun) -> None:
        """Store a new run (state running) and its tasks (state waiting), all or nothing."""
        async with self.transaction() as conn:
            await conn.execute(*insert("runs", run_values(run)))
            rows = [task_values(run.id, t) for t in run.tasks]
            if rows:
                await conn.executemany(insert("tasks", rows[0])[0], rows)

    async def set_run_state(
        self,
        run_id: str,
        state: RunState,
        message: str,
        now_s: float,
        conn: aiosqlite.Connection | None = None,
    ) -> None:
        """Set a run's state and message; a finished state records the time."""
        finished = None if state == "running" else now_s
        async with self._writing(conn) as c:
            await c.execute(
                "UPDATE runs SET state = ?, message = ?, updated_s = ?, finished_s = ?"
                " WHERE id = ?",
                (state, message, now_s, finished, run_id),
            )

    async def stop_runs(self, run_ids: Sequence[str], now_s: float) -> None:
        """``run_ids`` stop at ``now_s`` (their session ends before they did): a pause
        begins, unless one is open already."""
        async with self.transaction() as c:
            for run_id in run_ids:
                open_ = await c.execute_fetchall(
                    "SELECT 1 FROM pauses WHERE run_id = ? AND resumed_s IS NULL", (run_id,)
                )
                if not list(open_):
                    await self._pause(c, run_id, now_s, None)

    async def resume_runs(self, run_ids: Sequence[str], now_s: float) -> None:
        """``run_ids`` go on at ``now_s``: their open pause ends; one without (its session was
        killed) is paused from its last recorded activity."""
        async with self.transaction() as c:
            for run_id in run_ids:
                cursor = await c.execute(
                    "UPDATE pauses SET resumed_s = max(?, stopped_s)"
                    " WHERE run_id = ? AND resumed_s IS NULL",
                    (now_s, run_id),
                )
                if cursor.rowcount:
                    continue
                rows = list(await c.execute_fetchall(LAST_ACTIVITY_SQL, (run_id,) * 4))
                last = rows[0][0] if rows else None
                if last is not None and float(last) < now_s:
                    await self._pause(c, run_id, float(last), now_s)

    @staticmethod
    async def _pause(
        c: aiosqlite.Connection, run_id: str, stopped_s: float, resumed_s: float | None
    ) -> None:
        await c.execute(
            "INSERT OR IGNORE INTO pauses (run_id, stopped_s, resumed_s) VALUES (?, ?, ?)",
            (run_id, stopped_s, resumed_s),
        )

    async def set_task(
        self,
        run_id: str,
        task: str,
        *,
        state: TaskState | None = None,
        status: str | None = None,
        queue: str | None = None,
        resource_key: str | None = None,
        resources: Mapping[str, Any] | None = None,
        now_s: float | None = None,
        conn: aiosqlite.Connection | None = None,
        phase: TaskPhase | None = None,
    ) -> None:
        """Update the given fields of a task; a ``state`` needs ``now_s`` (a finished task's
        finish time)."""
        given: dict[str, Any] = {
            "status": status,
            "queue": queue,
            "resource_key": resource_key,
            "phase": phase,
        }
        if resources is not None:
            given["resources"] = dumps(dict(resources))
        values = {column: value for column, value in given.items() if value is not None}
        if state is not None:
            if now_s is None:
                raise ValueError("RunStore.set_task: a state change needs now_s")
            values["state"] = state
            values["finished_s"] = now_s if state in FINISHED_TASK_STATES else None
        if not values:
            return
        sets, params = [f"{column} = ?" for column in values], list(values.values())
        async with self._writing(conn) as c:
            await c.execute(
                f"UPDATE tasks SET {', '.join(sets)} WHERE run_id = ? AND name = ?",
                (*params, run_id, task),
            )

    async def reuse_task(
        self,
        run_id: str,
        task: str,
        from_run: str,
        status: str,
        now_s: float,
        conn: aiosqlite.Connection | None = None,
    ) -> None:
        """Mark a task that has not started done with the outputs of ``from_run``'s."""
        async with self._writing(conn) as c:
            cursor = await c.execute(
                "UPDATE tasks SET state = 'done', status = ?, reused_from = ?, started_s = ?,"
                " finished_s = ? WHERE run_id = ? AND name = ?"
                f" AND state IN {sql_list(NOT_STARTED_TASK_STATES)}",
                (status, from_run, now_s, now_s, run_id, task),
            )
            if cursor.rowcount != 1:
                raise ValueError(f"task {task!r} of run {run_id!r} has started, it cannot reuse")

    async def start_task(
        self,
        run_id: str,
        task: str,
        units: int,
        now_s: float,
        conn: aiosqlite.Connection | None = None,
        reused: Sequence[range] = (),
        reused_from: str | None = None,
    ) -> None:
        """Set a task running with ``units`` pending chunk units (no row each: its frontier
        says so) or its one command unit; the units of ``reused`` (sorted, disjoint ranges
        taken from run ``reused_from``) start done, as spans."""
        async with self._writing(conn) as c:
            rows = list(
                await c.execute_fetchall(
                    "SELECT splittable, state FROM tasks WHERE run_id = ? AND name = ?",
                    (run_id, task),
                )
            )
            if not rows:
                raise KeyError(f"run {run_id!r} has no task {task!r}")
            splittable, state = bool(rows[0][0]), rows[0][1]
            if state not in NOT_STARTED_TASK_STATES:
                raise ValueError(f"task {task!r} of run {run_id!r} is {state}, it cannot start")
            if units < 0 or (not splittable and units != 1):
                raise ValueError(f"task {task!r}: cannot start with {units} units")
            if reused and not splittable:
                raise ValueError(f"task {task!r}: only a splittable task reuses units")
            await c.execute(
                "UPDATE tasks SET state = 'running', units = ?, started_s = ?, status = '',"
                " phase = '', frontier = 0, spans_done = 0 WHERE run_id = ? AND name = ?",
                (units, now_s, run_id, task),
            )
            if not splittable:
                await c.execute(
                    "INSERT INTO units (run_id, task, idx, kind, state)"
                    " VALUES (?, ?, ?, 'command', 'pending')",
                    (run_id, task, COMMAND_INDEX),
                )
            elif reused:
                await self._reuse_units(c, run_id, task, units, reused, reused_from, now_s)

    @staticmethod
    async def _reuse_units(
        c: aiosqlite.Connection,
        run_id: str,
        task: str,
        units: int,
        reused: Sequence[range],
        reused_from: str | None,
        now_s: float,
    ) -> None:
        """Make the units of ``reused`` done (a span each, job ``reused:RUN``), the others
        below the last of them pending rows, and the frontier past them."""
        if reused_from is None:
            raise ValueError(f"task {task!r}: reused units need the run they come from")
        start = unit_start(units, reused)
        await c.executemany(
            "INSERT INTO spans (run_id, task, first_idx, last_idx, attempt, job_id, memory_gb,"
            " worker, queued_s, started_s, finished_s)"
            " VALUES (?, ?, ?, ?, 0, ?, NULL, NULL, ?, ?, ?)",
            [
                (run_id, task, r.start, r.stop - 1, f"reused:{reused_from}", now_s, now_s, now_s)
                for r in reused
            ],
        )
        for part in start.pending:
            await insert_unit_rows(c, run_id, task, part, state="pending")
        await c.execute(
            "UPDATE tasks SET frontier = ?, spans_done = ?, units_reused = ?,"
            " units_reused_from = ? WHERE run_id = ? AND name = ?",
            (start.frontier, start.reused, start.reused, reused_from, run_id, task),
        )

    async def add_merge_unit(
        self, run_id: str, task: str, conn: aiosqlite.Connection | None = None
    ) -> None:
        """Create the pending merge unit of a task, once."""
        async with self._writing(conn) as c:
            await c.execute(
                "INSERT OR IGNORE INTO units (run_id, task, idx, kind, state)"
                " VALUES (?, ?, ?, 'merge', 'pending')",
                (run_id, task, MERGE_INDEX),
            )

    async def add_jobs(
        self, jobs: Sequence[NewJob], now_s: float, conn: aiosqlite.Connection | None = None
    ) -> None:
        """Record jobs as in flight and move their units from pending to queued. A fresh job
        must start at its task's frontier, which moves past it; the units of the others
        must be pending rows; else nothing is written."""
        unit_params = [
            (j.attempt, j.id, j.memory_gb, now_s, j.run, j.task, i)
            for j in jobs
            if not j.fresh
            for i in j.indices
        ]
        async with self._writing(conn) as c:
            await self._give_rows(c, [j for j in jobs if not j.fresh])
            before = c.total_changes
            await c.executemany(
                "UPDATE units SET state = 'queued', attempt = ?, job_id = ?, memory_gb = ?,"
                " worker = NULL, queued_s = ?, started_s = NULL, finished_s = NULL"
                " WHERE run_id = ? AND task = ? AND idx = ? AND state = 'pending'",
                unit_params,
            )
            if c.total_changes - before != len(unit_params):
                raise ValueError(
                    f"RunStore.add_jobs: only {c.total_changes - before} of {len(unit_params)} "
                    "units were pending; nothing was dispatched"
                )
            for j in jobs:
                if not j.fresh:
                    continue
                if not isinstance(j.indices, range) or j.indices.step != 1 or not j.indices:
                    raise ValueError(f"RunStore.add_jobs: fresh job {j.id} is not one range")
                before = c.total_changes
                await c.execute(
                    "UPDATE tasks SET frontier = ? WHERE run_id = ? AND name = ?"
                    " AND splittable = 1 AND frontier = ? AND units >= ?",
                    (j.indices[-1] + 1, j.run, j.task, j.indices[0], j.indices[-1] + 1),
                )
                if c.total_changes == before:
                    raise ValueError(
                        f"RunStore.add_jobs: job {j.id} takes units {j.indices[0]}.."
                        f"{j.indices[-1]} of task {j.task!r}, which are not the next fresh "
                        "ones; nothing was dispatched"
                    )
            rows = [job_values(j, now_s) for j in jobs]
            if rows:
                await c.executemany(insert("jobs", rows[0])[0], rows)
            requested: dict[tuple[str, str], float] = {}
            for j in jobs:
                if j.kind != "merge":
                    task = (j.run, j.task)
                    requested[task] = max(j.memory_gb, requested.get(task, j.memory_gb))
            await c.executemany(
                f"UPDATE tasks SET {raised('requested_gb', 'gb')}"
                " WHERE run_id = :run AND name = :task",
                [{"run": r, "task": t, "gb": gb} for (r, t), gb in sorted(requested.items())],
            )

    @staticmethod
    async def _give_rows(c: aiosqlite.Connection, jobs: Sequence[NewJob]) -> None:
        """Fresh units that jobs of unit rows take get pending rows first: they must be the
        next ones from their task's frontier, which moves past them."""
        wanted: dict[tuple[str, str], list[int]] = {}
        for j in jobs:
            if j.kind == "chunk":
                wanted.setdefault((j.run, j.task), []).extend(j.indices)
        for (run_id, task), indices in sorted(wanted.items()):
            rows = list(
                await c.execute_fetchall(
                    "SELECT frontier, units FROM tasks WHERE run_id = ? AND name = ?"
                    " AND splittable = 1",
                    (run_id, task),
                )
            )
            if not rows:
                continue
            frontier, units = int(rows[0][0]), int(rows[0][1] or 0)
            fresh = sorted(i for i in indices if i >= frontier)
            if not fresh:
                continue
            if fresh != list(range(frontier, frontier + len(fresh))) or fresh[-1] >= units:
                raise ValueError(
                    f"RunStore.add_jobs: units {fresh[0]}..{fresh[-1]} of task {task!r} are "
                    f"not the next fresh ones (from {frontier}, of {units}); nothing was "
                    "dispatched"
                )
            await insert_unit_rows(c, run_id, task, range(fresh[0], fresh[-1] + 1), state="pending")
            await c.execute(
                "UPDATE tasks SET frontier = ? WHERE run_id = ? AND name = ?",
                (fresh[-1] + 1, run_id, task),
            )

    async def see_jobs(
        self,
        sightings: Mapping[str, tuple[str, bool]],
        now_s: float,
        conn: aiosqlite.Connection | None = None,
    ) -> int:
        """Record what worker heartbeats said: job id → (worker id, whether it runs). Units
        of a running job become running on that worker. Returns the units changed."""
        items = list(sightings.items())
        async with self._writing(conn) as c:
            await c.executemany(
                "UPDATE jobs SET worker = ? WHERE id = ? AND worker IS NOT ?",
                [(w, job, w) for job, (w, _) in items],
            )
            before = c.total_changes
            await c.executemany(
                "UPDATE units SET worker = ?, state = 'running',"
                " started_s = coalesce(started_s, ?)"
                " WHERE job_id = ?"
                " AND (state = 'queued' OR (state = 'running' AND worker IS NOT ?))",
                [(w, now_s, job, w) for job, (w, running) in items if running],
            )
            await c.executemany(
                "UPDATE units SET worker = ? WHERE job_id = ? AND state = 'queued'"
                " AND worker IS NOT ?",
                [(w, job, w) for job, (w, running) in items if not running],
            )
            changed: int = c.total_changes - before
            # A range job's units run when the job does: one row says it for all of them.
            for job, (_, running) in items:
                if not running:
                    continue
                rows = list(
                    await c.execute_fetchall(
                        "UPDATE jobs SET running = 1, started_s = coalesce(started_s, ?)"
                        " WHERE id = ? AND first_idx IS NOT NULL AND running = 0"
                        " RETURNING last_idx - first_idx + 1",
                        (now_s, job),
                    )
                )
                changed += sum(int(r[0]) for r in rows)
            return changed

    async def release_jobs(
        self, job_ids: Sequence[str], reason: str, conn: aiosqlite.Connection | None = None
    ) -> int:
        """Give up on jobs in flight: their active units go back to pending with ``reason``
        as their last error. Returns the units released."""
        async with self._writing(conn) as c:
            await materialize_jobs(c, job_ids)
            before = c.total_changes
            await c.executemany(
                "UPDATE units SET state = 'pending', worker = NULL, error = ?"
                f" WHERE job_id = ? AND state IN {sql_list(ACTIVE_UNIT_STATES)}",
                [(reason, j) for j in job_ids],
            )
            released: int = c.total_changes - before
            await c.executemany("DELETE FROM jobs WHERE id = ?", [(j,) for j in job_ids])
            return released

    async def release_orphans(self, conn: aiosqlite.Connection | None = None) -> int:
        """Active units of running runs whose job is not in flight (a file edited by hand,
        a bug) go back to pending. Returns how many."""
        async with self._writing(conn) as c:
            before = c.total_changes
            await c.execute(
                "UPDATE units SET state = 'pending', worker = NULL,"
                " error = 'its job was no longer in flight'"
                " WHERE run_id IN (SELECT id FROM runs WHERE state = 'running')"
                f" AND state IN {sql_list(ACTIVE_UNIT_STATES)}"
                " AND (job_id IS NULL OR job_id NOT IN (SELECT id FROM jobs))"
            )
            released: int = c.total_changes - before
            return released

    async def apply_reports(
        self,
        entries: Sequence[ReportEntry],
        *,
        conn: aiosqlite.Connection,
        limits: Limits,
        now_s: float,
    ) -> Applied:
        """Apply the unit outcomes of report entries inside the caller's transaction
        (`simrun.runstore.apply`); the entries whose job was in flight come back in
        ``Applied.recorded``, so a report read twice is recorded once."""
        if not conn.in_transaction:
            raise RuntimeError("RunStore.apply_reports: the connection is not in a transaction")
        return await write_reports(conn, entries, limits, now_s)

    async def _run_again(
        self, run_id: str, task: str | None, memory_gb: float | None
    ) -> tuple[RunRow, list[TaskRow]]:
        """A run that a replay or rerun of ``task`` may run again, and its tasks;
        `RunStateError` says why not."""
        run = await self.run(run_id)
        if run is None:
            raise UnknownRunError(f"there is no run {run_id!r}")
        if run.state == "cancelled":
            raise RunStateError(f"run {run_id!r} was cancelled; submit it again instead")
        if memory_gb is not None and not memory_gb > 0:
            raise RunStateError(f"memory_gb must be more than 0, got {memory_gb!r}")
        tasks = await self.tasks(run_id)
        names = sorted(t.name for t in tasks)
        if task is not None and task not in names:
            raise RunStateError(f"run {run_id!r} has no task {task!r} (its tasks: {names})")
        return run, tasks

    async def _failed(
        self, run_id: str, task: str | None, indices: Sequence[int]
    ) -> list[tuple[str, int]]:
        """The failed units of a run (or of ``task``, or only its ``indices``) to replay."""
        where, params = ("AND task = ?", [run_id, task]) if task is not None else ("", [run_id])
        sql = f"SELECT task, idx FROM units WHERE run_id = ? AND state = 'failed' {where}"
        failed = [(str(t), int(i)) for t, i in await self._fetch(sql, params)]
        if indices:
            wanted = set(indices)
            failed = [(t, i) for t, i in failed if i in wanted]
            missing = sorted(wanted - {i for _, i in failed})
            if missing:
                raise RunStateError(f"task {task!r}: units {missing} are not failed")
        if not failed:
            scope = f"task {task!r} of run {run_id!r}" if task else f"run {run_id!r}"
            raise RunStateError(f"{scope} has no failed units to replay")
        return failed

    async def replay(
        self,
        run_id: str,
        now_s: float,
        task: str | None = None,
        indices: Sequence[int] = (),
        memory_gb: float | None = None,
    ) -> int:
        """Put failed units back to pending (all of the run, of one ``task``, or only
        ``indices`` of it) with fresh retry counts, ``memory_gb`` fixing the memory per
        process of their tasks; returns how many. `RunStateError` says why none."""
        run, _ = await self._run_again(run_id, task, memory_gb)
        if indices and task is None:
            raise RunStateError("unit indices need a task (--task) to pick them from")
        failed = await self._failed(run_id, task, indices)
        async with self.transaction() as c:
            await c.executemany(
                "UPDATE units SET state = 'pending', errors = 0, kills = 0, finished_s = NULL,"
                " not_before_s = NULL"
                " WHERE run_id = ? AND task = ? AND idx = ? AND state = 'failed'",
                [(run_id, t, i) for t, i in failed],
            )
            await c.executemany(
                "UPDATE tasks SET state = CASE WHEN EXISTS (SELECT 1 FROM units WHERE"
                " run_id = tasks.run_id AND task = tasks.name AND kind = 'merge' AND"
                " state = 'pending') THEN 'merging' ELSE 'running' END,"
                " status = '', phase = '', finished_s = NULL,"
                " memory_override_gb = coalesce(?, memory_override_gb)"
                " WHERE run_id = ? AND name = ?",
                [(memory_gb, run_id, t) for t in sorted({t for t, _ in failed})],
            )
            if run.finished_s is not None:  # an ended run: the time until now was no run time
                await self._pause(c, run_id, run.finished_s, now_s)
            await self.set_run_state(run_id, "running", "", now_s, conn=c)
        return len(failed)

    async def rerun(
        self, run_id: str, task: str, now_s: float, memory_gb: float | None = None
    ) -> tuple[list[str], int]:
        """Run ``task`` again from the start, and every task that reads its outputs: each
        goes back to ``waiting`` with no unit (fresh units of attempt 1 once it starts
        again). Returns the tasks reset, ``task`` first, and the units they had; the caller
        drops their attempts hashes."""
        _, rows = await self._run_again(run_id, task, memory_gb)
        names = {t.name: t for t in rows}
        if names[task].state in NOT_STARTED_TASK_STATES:
            raise RunStateError(
                f"task {task!r} of run {run_id!r} has not run yet ({names[task].state}): "
                "nothing to run again"
            )
        below = downstream({t.name: t.depends for t in rows}, task)
        chosen = [task, *(t.name for t in rows if t.name in below)]
        active = {n for n in chosen if names[n].state in ACTIVE_TASK_STATES}
        active |= {j.task for j in await self.jobs(run_id)} & set(chosen)
        if active:
            raise RunStateError(
                f"task {', '.join(repr(n) for n in sorted(active))} of run {run_id!r} is still"
                " running; let the run end first (or cancel it and submit it again)"
            )
        params = [(run_id, n) for n in chosen]
        async with self.transaction() as c:
            await c.executemany("DELETE FROM units WHERE run_id = ? AND task = ?", params)
            await c.executemany("DELETE FROM spans WHERE run_id = ? AND task = ?", params)
            await c.executemany(
                "UPDATE tasks SET state = 'waiting', status = '', phase = '', units = NULL,"
                " started_s = NULL, finished_s = NULL, frontier = 0, spans_done = 0,"
                # Run again means run: no reuse of earlier work, whole or per unit.
                " reuse = 0, reused_from = NULL, units_reused = 0, units_reused_from = NULL,"
                " memory_override_gb = CASE WHEN name = ? AND ? IS NOT NULL THEN ?"
                " ELSE memory_override_gb END"
                " WHERE run_id = ? AND name = ?",
                [(task, memory_gb, memory_gb, *p) for p in params],
            )
            await self.set_run_state(run_id, "running", "", now_s, conn=c)
        return chosen, sum(names[n].units or 0 for n in chosen)

    async def cancel(self, run_id: str, now_s: float) -> list[UnitRow]:
        """Cancel a running run: unfinished tasks become cancelled, its jobs leave the set in
        flight; returns their units as they were (the caller tells workers they are stale)."""
        run = await self.run(run_id)
        if run is None:
            raise UnknownRunError(f"there is no run {run_id!r}")
        if run.state != "running":
            raise RunStateError(f"run {run_id!r} already ended ({run.state}); nothing to cancel")
        active = await self.units(run_id, states=sorted(ACTIVE_UNIT_STATES))
        async with self.transaction() as c:
            job_ids = [
                str(r[0])
                for r in await c.execute_fetchall("SELECT id FROM jobs WHERE run_id = ?", (run_id,))
            ]
            await self.release_jobs(job_ids, "the run was cancelled", conn=c)
            await c.execute(
                "UPDATE tasks SET state = 'cancelled', finished_s = ?, status = 'cancelled'"
                f" WHERE run_id = ? AND state NOT IN {sql_list(FINISHED_TASK_STATES)}",
                (now_s, run_id),
            )
            await self.set_run_state(run_id, "cancelled", "cancelled", now_s, conn=c)
        return active
