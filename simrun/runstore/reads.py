"""The read side of the run store: queries on a connection of their own.

WAL lets this connection see the last committed state while the writer works, so the HTTP
API never waits for a report batch, and never sees half of one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from simrun.core.states import TaskCounts, UnitKind, UnitRow, UnitState
from simrun.runstore.rows import JobRow, RunRow, TaskRow, counts_of, run_of, task_of, unit_of
from simrun.runstore.schema import JOB_COLUMNS, RUN_COLUMNS, TASK_COLUMNS, UNIT_COLUMNS

__all__ = ["RunReads", "chunks", "marks"]

#: Most host parameters in one statement, well below SQLite's limit.
BATCH = 500


def chunks(items: Sequence[Any], size: int = BATCH) -> list[Sequence[Any]]:
    """``items`` in slices of at most ``size``."""
    return [items[start : start + size] for start in range(0, len(items), size)]


def marks(n: int) -> str:
    """``?, ?, …`` for ``n`` parameters."""
    return ", ".join("?" * n)


class RunReads:
    """Queries of run state; `simrun.runstore.RunStore` adds the writes."""

    path: Path

    def __init__(self) -> None:
        self._read: aiosqlite.Connection | None = None
        self._read_lock = asyncio.Lock()

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        if self._read is None:
            raise RuntimeError(f"RunStore({self.path}) is closed or was never opened")
        async with self._read_lock:
            return list(await self._read.execute_fetchall(sql, params))

    async def run(self, run_id: str) -> RunRow | None:
        rows = await self._fetch(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return run_of(rows[0]) if rows else None

    async def runs(self, limit: int = 100, states: Sequence[str] = ()) -> list[RunRow]:
        """The latest runs first, optionally only those in ``states``."""
        where = f"WHERE state IN ({marks(len(states))})" if states else ""
        rows = await self._fetch(
            f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY created_s DESC, id DESC LIMIT ?",
            (*states, limit),
        )
        return [run_of(r) for r in rows]

    async def running_runs(self) -> list[RunRow]:
        """Every run in state running, the latest first."""
        rows = await self._fetch(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE state = 'running'"
            " ORDER BY created_s DESC, id DESC"
        )
        return [run_of(r) for r in rows]

    async def tasks(self, run_id: str) -> list[TaskRow]:
        """The tasks of a run in topological order."""
        rows = await self._fetch(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY position", (run_id,)
        )
        return [task_of(r) for r in rows]

    async def counts(self, run_id: str) -> dict[str, TaskCounts]:
        """Units by state of every task of a run that has units."""
        rows = await self._fetch(
            "SELECT task, kind, state, count(*) FROM units WHERE run_id = ?"
            " GROUP BY task, kind, state",
            (run_id,),
        )
        return counts_of(rows)

    async def pending_units(
        self, run_id: str, task: str, limit: int, kind: UnitKind | None = None
    ) -> list[UnitRow]:
        """Up to ``limit`` pending units of a task, by index."""
        kind_clause = "AND kind = ?" if kind is not None else ""
        rows = await self._fetch(
            f"SELECT {UNIT_COLUMNS} FROM units INDEXED BY units_pending"
            f" WHERE run_id = ? AND task = ? AND state = 'pending' {kind_clause}"
            " ORDER BY idx LIMIT ?",
            (run_id, task, *((kind,) if kind else ()), limit),
        )
        return [unit_of(r) for r in rows]

    async def units(
        self, run_id: str, task: str | None = None, states: Sequence[UnitState] = ()
    ) -> list[UnitRow]:
        """The units of a run (or one task), optionally only those in ``states``."""
        sql = f"SELECT {UNIT_COLUMNS} FROM units WHERE run_id = ?"
        params: list[Any] = [run_id]
        if task is not None:
            sql += " AND task = ?"
            params.append(task)
        if states:
            sql += f" AND state IN ({marks(len(states))})"
            params += states
        rows = await self._fetch(sql + " ORDER BY task, idx", params)
        return [unit_of(r) for r in rows]

    async def jobs(self, run_id: str | None = None) -> list[JobRow]:
        """The jobs in flight (of one run, or all)."""
        where, params = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        rows = await self._fetch(
            f"SELECT {JOB_COLUMNS} FROM jobs {where} ORDER BY enqueued_s, id", params
        )
        return [JobRow(*r) for r in rows]

    async def jobs_in_flight(self) -> dict[str, int]:
        """Number of jobs in flight per logical queue."""
        rows = await self._fetch("SELECT queue, count(*) FROM jobs GROUP BY queue")
        return {str(q): int(n) for q, n in rows}

    async def failures(self, run_id: str) -> list[UnitRow]:
        """The failed units of a run with their last error, by task and index."""
        return await self.units(run_id, states=("failed",))

    async def pending_counts(self, run_id: str) -> dict[str, dict[str, int]]:
        """Pending units of a run per task and kind (chunk, command, merge); cheap when
        few are pending (a partial index holds only pending units)."""
        rows = await self._fetch(
            "SELECT task, kind, count(*) FROM units INDEXED BY units_pending"
            " WHERE run_id = ? AND state = 'pending' GROUP BY task, kind",
            (run_id,),
        )
        out: dict[str, dict[str, int]] = {}
        for task, kind, n in rows:
            out.setdefault(str(task), {})[str(kind)] = int(n)
        return out
