"""`ResourceStore`: the observations of past tasks in the service's SQLite file, all their SQL
(`policy` decides); `record_many` can also write in a caller's transaction."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from simrun.core.reports import WorkerReport
from simrun.core.wire import is_finite_nonneg
from simrun.db import (
    FileKeeper,
    Migration,
    SchemaError,
    component_version,
    damage_of,
    migrate,
    session,
    transaction,
)
from simrun.plugins import ResourceHint
from simrun.resources.keys import ResourceKey
from simrun.resources.policy import (
    WINDOW,
    Explanation,
    Observation,
    ResolvedResources,
    decide,
    explain,
    learn,
)
from simrun.workflow import ResourceOverride

#: The component of the database file that this store owns (see `simrun.db.migrate`).
COMPONENT = "resources"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "observations: one row per worker process of a report, or one per kill",
        (
            "CREATE TABLE observations ("
            " id INTEGER PRIMARY KEY,"  # recording order: 'later' means a larger id
            " key TEXT NOT NULL,"  # ResourceKey.text()
            " run TEXT NOT NULL DEFAULT '',"
            " memory_gb REAL NOT NULL CHECK (memory_gb >= 0),"  # the limit for a kill
            " oom INTEGER NOT NULL CHECK (oom IN (0, 1)),"
            " seconds_per_unit REAL CHECK (seconds_per_unit >= 0),"
            " units INTEGER NOT NULL CHECK (units >= 0),"
            " base_gb REAL NOT NULL CHECK (base_gb >= 0),"
            " limit_gb REAL NOT NULL CHECK (limit_gb >= 0),"
            " recorded_s REAL NOT NULL,"  # Unix time
            " input_bytes INTEGER CHECK (input_bytes >= 0)"  # the size of the task's inputs
            ")",
            "CREATE INDEX observations_by_key ON observations (key, oom, id)",
        ),
    ),
)

_INSERT = (
    "INSERT INTO observations"
    " (key, run, memory_gb, oom, seconds_per_unit, units, base_gb, limit_gb, recorded_s,"
    " input_bytes)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# The window (a key's last N successes) and its last N kills, oldest first, by the index.
_HISTORY = (
    "SELECT * FROM ("
    " SELECT id, memory_gb, oom, seconds_per_unit, run, input_bytes FROM observations"
    " WHERE key = :key AND oom = 0 ORDER BY id DESC LIMIT :window"
    ") UNION ALL SELECT * FROM ("
    " SELECT id, memory_gb, oom, seconds_per_unit, run, input_bytes FROM observations"
    " WHERE key = :key AND oom = 1 ORDER BY id DESC LIMIT :window"
    ") ORDER BY id"
)

#: A key's latest kills (time recorded, limit), the latest first.
_KILLS = (
    "SELECT recorded_s, memory_gb FROM observations"
    " WHERE key = ? AND oom = 1 ORDER BY id DESC LIMIT ?"
)

Row = tuple[str, str, float, int, float | None, int, float, float, float, int | None]


@dataclass(frozen=True)
class Record:
    """One report to record: what `ResourceStore.record` takes, for the batch path."""

    key: ResourceKey
    report: WorkerReport
    base_gb: float
    oom: bool = False
    run: str = ""
    input_bytes: int | None = None


@dataclass(frozen=True)
class KeySummary:
    """What is known about one key (for ``simrun resources``): what a task of it would request
    now, the typical peak, and its latest kill (Unix time, limit)."""

    key: ResourceKey
    observations: int
    samples: int
    typical_gb: float | None
    requested_gb: float
    seconds_per_unit: float | None
    source: str
    last_kill_s: float | None
    last_kill_gb: float | None


#: How many of a key's latest kills `ResourceStore.evidence` lists.
EVIDENCE_KILLS = 50


@dataclass(frozen=True)
class KeyEvidence:
    """What ``simrun resources KEY`` shows of one key: `policy.explain` on its history, the
    window's peaks and their times, its latest kills, its count of observations."""

    key: ResourceKey
    explanation: Explanation
    peaks_gb: tuple[float, ...]
    kills: tuple[tuple[float, float], ...]
    observations: int
    peaks_s: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as JSON reads back: the key as its text, tuples as lists."""
        return {
            "key": self.key.text(),
            "explanation": {**asdict(self.explanation), "reasons": list(self.explanation.reasons)},
            "peaks_gb": list(self.peaks_gb),
            "peaks_s": list(self.peaks_s),
            "kills": [list(kill) for kill in self.kills],
            "observations": self.observations,
        }


def rows_of(record: Record, recorded_s: float) -> list[Row]:
    """The rows a record becomes, checked: one per worker process of a successful report, one
    at the limit for a kill; `ValueError` names the key, the run and the bad field."""
    report = record.report
    if not isinstance(record.key, ResourceKey):
        raise TypeError(f"Record.key must be a ResourceKey, got {type(record.key).__name__}")
    problem = None
    if not is_finite_nonneg(record.base_gb):
        problem = f"base_gb must be a finite number >= 0, got {record.base_gb!r}"
    elif record.oom and not report.limit_gb > 0:
        problem = "a kill for memory needs the limit the process had (limit_gb > 0)"
    elif not record.oom and not report.peak_memory_gb:
        problem = "peak_memory_gb is empty: a successful report measures its processes"
    elif record.input_bytes is not None and not (
        isinstance(record.input_bytes, int) and record.input_bytes >= 0
    ):
        problem = f"input_bytes must be an integer >= 0, got {record.input_bytes!r}"
    if problem is not None:
        raise ValueError(
            f"cannot record the report of {record.key.text()} (run {record.run!r}): {problem}"
        )
    base = (record.key.text(), record.run)
    tail = (report.units, float(record.base_gb), report.limit_gb, recorded_s, record.input_bytes)
    if record.oom:
        return [(*base, report.limit_gb, 1, None, *tail)]
    seconds = report.seconds_per_unit
    return [(*base, peak, 0, seconds, *tail) for peak in report.peak_memory_gb]


class ResourceStore:
    """The observations of past tasks' workers, in the SQLite file ``db`` (on a local volume:
    SQLite's locking does not hold over NFS), created on first use."""

    def __init__(self, db: Path, *, keep_open: bool = True) -> None:
        self.db = Path(db)
        self._schema_ready = False
        # An idle connection keeps the WAL files alive between calls (simrun.db.FileKeeper).
        self._keeper = FileKeeper(self.db) if keep_open else None

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[aiosqlite.Connection]:
        async with session(self.db) as conn:
            if not self._schema_ready:
                await self.ensure_schema(conn)
            if self._keeper is not None and not self._keeper.is_open:
                await asyncio.to_thread(self._keeper.open)
            yield conn

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.close()

    async def __aenter__(self) -> ResourceStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    async def ensure_schema(self, conn: aiosqlite.Connection) -> None:
        """Create or upgrade this store's tables on ``conn`` (outside any transaction)."""
        try:
            await migrate(conn, COMPONENT, MIGRATIONS)
        except SchemaError as exc:
            raise SchemaError(f"{self.db}: {exc}") from exc
        except aiosqlite.Error as exc:
            found = damage_of(self.db, exc)
            if found is None:
                raise
            raise found from None
        self._schema_ready = True

    async def record(
        self,
        key: ResourceKey,
        report: WorkerReport,
        base_gb: float,
        oom: bool = False,
        run: str = "",
        input_bytes: int | None = None,
    ) -> None:
        """Store one worker report under ``key`` (with ``oom``: one kill at its limit)."""
        await self.record_many([Record(key, report, base_gb, oom, run, input_bytes)])

    async def record_many(
        self, records: Iterable[Record], conn: aiosqlite.Connection | None = None
    ) -> int:
        """Store many reports in one transaction (every record checked first); returns the number
        of observations. With ``conn`` (the caller's, in its transaction) the caller commits."""
        now_s = time.time()
        rows = [row for record in records for row in rows_of(record, now_s)]
        if conn is not None:
            if not conn.in_transaction:
                raise RuntimeError(
                    "ResourceStore.record_many: the caller's connection is not in a "
                    "transaction; open one (simrun.db.transaction) and commit it yourself"
                )
            if not self._schema_ready:
                if await component_version(conn, COMPONENT) < len(MIGRATIONS):
                    raise RuntimeError(
                        f"ResourceStore.record_many: the {COMPONENT!r} tables of {self.db} are "
                        "not created yet; call ensure_schema(conn) before the transaction"
                    )
                self._schema_ready = True
            await conn.executemany(_INSERT, rows)
            return len(rows)
        if not rows:
            return 0
        async with self._connection() as own, transaction(own):
            await own.executemany(_INSERT, rows)
        return len(rows)

    async def _history(
        self, conn: aiosqlite.Connection, key: ResourceKey, window: int
    ) -> list[Observation]:
        """Exactly what `learn` needs: the window of successes and the last kills."""
        rows = await conn.execute_fetchall(_HISTORY, {"key": key.text(), "window": window})
        return [
            Observation(
                float(memory),
                bool(oom),
                None if spu is None else float(spu),
                str(run),
                None if size is None else int(size),
            )
            for _, memory, oom, spu, run, size in rows
        ]

    async def history(self, key: ResourceKey, window: int = WINDOW) -> list[Observation]:
        """The observations of ``key`` that a resolve looks at, oldest first."""
        async with self._connection() as conn:
            return await self._history(conn, key, window)

    async def resolve(
        self,
        key: ResourceKey,
        hint: ResourceHint,
        override: ResourceOverride | None,
        input_bytes: int | None = None,
    ) -> ResolvedResources:
        """The resources for a task of ``key`` (`policy.decide`)."""
        async with self._connection() as conn:
            history = await self._history(conn, key, WINDOW)
        return decide(history, hint, override, input_bytes=input_bytes)

    async def keys(self) -> list[ResourceKey]:
        async with self._connection() as conn:
            rows = await conn.execute_fetchall("SELECT DISTINCT key FROM observations")
        return sorted(ResourceKey.from_text(str(r[0])) for r in rows)

    async def summaries(self, hints: Mapping[str, ResourceHint] | None = None) -> list[KeySummary]:
        """One line per key: what was seen and what a task would request now (``hints`` by task
        type; a hint matters only for keys with kills and no success)."""
        hints = hints or {}
        out: list[KeySummary] = []
        async with self._connection() as conn:
            totals = await conn.execute_fetchall(
                "SELECT key, count(*) FROM observations GROUP BY key ORDER BY key"
            )
            for text, count in totals:
                key = ResourceKey.from_text(str(text))
                hint = hints.get(key.task_type, ResourceHint())
                history = await self._history(conn, key, WINDOW)
                learned = learn(history)
                resolved = decide(history, hint, None)
                kill = list(await conn.execute_fetchall(_KILLS, (key.text(), 1)))
                out.append(
                    KeySummary(
                        key=key,
                        observations=int(count),
                        samples=learned.samples,
                        typical_gb=learned.center_gb,
                        requested_gb=resolved.memory_per_worker_gb,
                        seconds_per_unit=learned.seconds_per_unit,
                        source=resolved.source,
                        last_kill_s=float(kill[0][0]) if kill else None,
                        last_kill_gb=float(kill[0][1]) if kill else None,
                    )
                )
        return out

    async def evidence(self, key: ResourceKey, hint: ResourceHint) -> KeyEvidence:
        """What ``key``'s request rests on (see `KeyEvidence`); ``hint`` is its type's."""
        async with self._connection() as conn:
            history = await self._history(conn, key, WINDOW)
            kills = await conn.execute_fetchall(_KILLS, (key.text(), EVIDENCE_KILLS))
            total = await conn.execute_fetchall(
                "SELECT count(*) FROM observations WHERE key = ?", (key.text(),)
            )
            times = await conn.execute_fetchall(  # the window's, as _HISTORY picks them
                "SELECT recorded_s FROM observations WHERE key = ? AND oom = 0"
                " ORDER BY id DESC LIMIT ?",
                (key.text(), WINDOW),
            )
        peaks_gb = tuple(o.memory_gb for o in history if not o.oom)
        peaks_s = tuple(float(t) for (t,) in reversed(list(times)))
        return KeyEvidence(
            key=key,
            explanation=explain(history, hint),
            peaks_gb=peaks_gb,
            peaks_s=peaks_s if len(peaks_s) == len(peaks_gb) else (),
            kills=tuple((float(s), float(gb)) for s, gb in reversed(list(kills))),
            observations=int(next(iter(total))[0]),
        )
