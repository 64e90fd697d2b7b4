"""The SQLite file of the service: connections (autocommit, WAL, foreign keys) and the
schema migrations of each component of the file (the run store's, the resource store's),
so that unit states and the observations of a report are written in one transaction."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from simrun.errors import SimrunError

#: How long a connection waits for another writer before SQLITE_BUSY, seconds.
DEFAULT_BUSY_TIMEOUT_S = 30.0

_VERSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_versions ("
    " component TEXT PRIMARY KEY,"
    " version INTEGER NOT NULL CHECK (version >= 0)"
    ")"
)


class SchemaError(SimrunError, RuntimeError):
    """The file's schema cannot be used by this version of simrun."""


@dataclass(frozen=True)
class Migration:
    """One step of a component's schema: SQL statements applied together, in order
    (separate strings: a script would end the transaction that makes the step atomic)."""

    description: str
    statements: tuple[str, ...]


def _journal_mode(conn: sqlite3.Connection, deadline_s: float) -> str:
    """The file's journal mode, switched to WAL when it is not yet; retried until
    ``deadline_s`` (monotonic) while SQLite answers "locked" without waiting on the busy
    timeout (another connection creating or deleting the WAL, for microseconds)."""
    delay_s = 0.001
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode").fetchone()
            if row is not None and str(row[0]).lower() == "wal":
                return "wal"
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return "" if row is None else str(row[0]).lower()
        except sqlite3.OperationalError as exc:
            transient = "locked" in str(exc) or "busy" in str(exc)
            if not transient or time.monotonic() + delay_s > deadline_s:
                raise
        time.sleep(delay_s)
        delay_s = min(delay_s * 2, 0.05)


#: The size the WAL file is cut back to once a checkpoint emptied it.
WAL_LIMIT_BYTES = 4 * 1024 * 1024


def _configure(conn: sqlite3.Connection, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
    """WAL, foreign keys, ``synchronous=NORMAL`` (durable across a crash of the process) and
    the WAL file cut back to `WAL_LIMIT_BYTES` after each checkpoint that empties it."""
    mode = _journal_mode(conn, time.monotonic() + busy_timeout_s)
    if mode != "wal":
        raise SchemaError(
            f"SQLite refused WAL mode (journal_mode is {mode!r}); "
            "the database must be a file on a local volume"
        )
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    # PRAGMA takes no parameters; the value is a constant of ours.
    conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")


class _Configured(sqlite3.Connection):
    """A connection configured as it opens, in aiosqlite's thread: no extra round trips."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            _configure(self, float(kwargs.get("timeout", DEFAULT_BUSY_TIMEOUT_S)))
        except BaseException:
            self.close()
            raise


async def connect(
    path: Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> aiosqlite.Connection:
    """A connection to the SQLite file at ``path`` (created when needed, with its
    directory): autocommit, WAL, waiting ``busy_timeout_s`` for a writer."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return await aiosqlite.connect(
            path, timeout=busy_timeout_s, isolation_level=None, factory=_Configured
        )
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from exc


@asynccontextmanager
async def session(
    path: Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> AsyncIterator[aiosqlite.Connection]:
    """A connection from `connect`, closed at the end of the block."""
    conn = await connect(path, busy_timeout_s=busy_timeout_s)
    try:
        yield conn
    finally:
        await conn.close()


class FileKeeper:
    """Holds one idle connection (no lock) to a WAL database so that its ``-wal`` and
    ``-shm`` files outlive the short connections of the stores, which would otherwise
    rebuild the WAL at each open. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        """Whether the idle connection is open."""
        return self._conn is not None

    def open(self) -> None:
        """Open the idle connection (blocking: call it through ``asyncio.to_thread``)."""
        with self._lock:
            if self._conn is not None:
                return
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, factory=_Configured
            )
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # maps the WAL index
            self._conn = conn

    def close(self) -> None:
        """Close the idle connection (the WAL is checkpointed if it was the last one)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@asynccontextmanager
async def transaction(conn: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """A write transaction on ``conn``: ``BEGIN IMMEDIATE`` (two writers queue on the busy
    timeout instead of one failing at its first write), then commit, or roll back."""
    if conn.in_transaction:
        raise RuntimeError("simrun.db.transaction: the connection is already in a transaction")
    await conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        await conn.rollback()
        raise
    await conn.commit()


async def component_version(conn: aiosqlite.Connection, component: str) -> int:
    """The version of ``component`` in the file, 0 when it was never migrated."""
    async with conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'"
    ) as cursor:
        if await cursor.fetchone() is None:
            return 0
    async with conn.execute(
        "SELECT version FROM schema_versions WHERE component = ?", (component,)
    ) as cursor:
        row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


async def migrate(conn: aiosqlite.Connection, component: str, steps: Sequence[Migration]) -> int:
    """Bring ``component`` up to ``len(steps)`` and return that version, in one transaction
    (concurrent callers apply each step once; a failing step leaves the file as it was).
    ``PRAGMA user_version`` is the sum of the components' versions. A component newer
    than ``steps`` (a later simrun's) raises `SchemaError`."""
    if not component:
        raise ValueError("simrun.db.migrate: the component name is empty")
    target = len(steps)
    if await component_version(conn, component) == target:
        return target  # the common case: nothing to do, no write lock taken
    async with transaction(conn):
        await conn.execute(_VERSIONS_TABLE)
        current = await component_version(conn, component)
        if current > target:
            raise SchemaError(
                f"the {component!r} schema of this database is at version {current}, but this "
                f"simrun knows versions up to {target}: upgrade simrun to use this file"
            )
        for number, step in enumerate(steps[current:], start=current + 1):
            for statement in step.statements:
                try:
                    await conn.execute(statement)
                except aiosqlite.Error as exc:
                    raise SchemaError(
                        f"migration {number} of {component!r} ({step.description}) failed: {exc}"
                    ) from exc
        await conn.execute(
            "INSERT INTO schema_versions (component, version) VALUES (?, ?)"
            " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
            (component, target),
        )
        async with conn.execute("SELECT coalesce(sum(version), 0) FROM schema_versions") as cur:
            row = await cur.fetchone()
        generation = int(row[0]) if row is not None else target
        # PRAGMA takes no parameters; the value is an int we computed.
        await conn.execute(f"PRAGMA user_version = {generation}")
    return target
