"""The SQLite file of the service: connections (autocommit, WAL, foreign keys) and the
schema migrations of each component of the file (the run store's, the resource store's),
so that unit states and the observations of a report are written in one transaction; the
refusal of a file that is empty, not a database or damaged (`DamagedDatabase`), its checks
(`quick_check` at open, `check_file` for ``simrun store check``), and the lock of its one
writer (`hold`, an ``flock`` of a file beside it)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

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


log = logging.getLogger(__name__)


class SchemaError(SimrunError, RuntimeError):
    """The file's schema cannot be used by this version of simrun."""


class DatabaseFileError(SimrunError, RuntimeError):
    """A database file that cannot be used now; the message is one line saying why."""


class DamagedDatabase(DatabaseFileError):
    """The file is empty, not a SQLite database, or damaged: refused, and left as it is."""


class FileInUse(DatabaseFileError):
    """Another process holds the lock of the file's one writer (`hold`): ``holder`` says
    who, as its `holder_line`."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def damaged(path: Path, what: str) -> DamagedDatabase:
    """The error of the database ``path`` that ``what`` (``is empty (0 bytes)``, ...)."""
    return DamagedDatabase(
        f"the database {path} {what}: it was left as it is; restore it from a backup (or move "
        f"it away to start with an empty one), and see `simrun store check {path}`"
    )


#: SQLite's primary result codes of a file that is not a database, or a damaged one.
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def _damage(exc: sqlite3.Error) -> str | None:
    """What ``exc`` says of its file when it says it is not a database or is damaged
    (``file is not a database``, ``database disk image is malformed``), else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or (code & 0xFF) not in _DAMAGE_CODES:
        return None
    if code & 0xFF == sqlite3.SQLITE_NOTADB:
        return f"is not a SQLite database ({exc})"
    return f"is damaged ({exc})"


def damage_of(path: Path, exc: sqlite3.Error) -> DamagedDatabase | None:
    """`DamagedDatabase` when ``exc`` says the file ``path`` is not a database or is
    damaged, else None."""
    what = _damage(exc)
    return None if what is None else damaged(path, what)


def refuse_empty(path: Path) -> None:
    """`DamagedDatabase` when the file ``path`` exists with 0 bytes (what a failed copy or
    restore leaves; SQLite would take it for a new, empty database). Blocking."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return  # a new store: the file is created
    if size == 0 and path.is_file():
        raise damaged(path, "is empty (0 bytes, as a failed copy or restore leaves it)")


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
        path = Path(args[0] if args else kwargs["database"])
        refuse_empty(path)
        super().__init__(*args, **kwargs)
        try:
            _configure(self, float(kwargs.get("timeout", DEFAULT_BUSY_TIMEOUT_S)))
        except sqlite3.Error as exc:
            self.close()
            found = damage_of(path, exc)
            if found is None:
                raise
            raise found from None
        except BaseException:
            self.close()
            raise


async def connect(
    path: Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> aiosqlite.Connection:
    """A connection to the SQLite file at ``path`` (created when needed, with its
    directory): autocommit, WAL, waiting ``busy_timeout_s`` for a writer. `DamagedDatabase`
    when the file is there but empty, not a database, or damaged where it was read."""
    path = Path(path)
    # Checked first in a plain connection: aiosqlite, when its connection fails, leaves a
    # thread that may call back into an event loop closed meanwhile (a traceback at exit).
    await asyncio.to_thread(_CHECKED.check_once, path, busy_timeout_s)
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


# -- checks of the file ----------------------------------------------------------------------

#: How long `quick_check` checks at most at open, seconds. PRAGMA quick_check costs 2.5 to
#: 4.5 ms per MB of file (0.2-0.4 s on a store of 1000 runs, 86 MB; 3.2-3.8 s on 10 000
#: runs, 860 MB, on this project's shared 2-core machine: benchmarks/db_check.py): a store
#: up to about 100 MB is checked whole, a bigger one in part at each first opening;
#: `check_file` (``simrun store check``, about twice as long) checks it all.
QUICK_CHECK_BUDGET_S = 0.5
#: Problems a check reports at most.
_PROBLEMS_SHOWN = 10


def quick_check(
    conn: sqlite3.Connection, path: Path, budget_s: float = QUICK_CHECK_BUDGET_S
) -> None:
    """`DamagedDatabase` when ``PRAGMA quick_check`` on ``conn`` (the file ``path``) finds a
    problem within ``budget_s`` (then it stops, as if it found none). Blocking."""
    deadline = time.monotonic() + budget_s
    stopped: list[bool] = []

    def over_budget() -> int:
        if time.monotonic() < deadline:
            return 0
        stopped.append(True)
        return 1  # SQLite interrupts the statement

    conn.set_progress_handler(over_budget, 1000)
    try:
        rows = conn.execute(f"PRAGMA quick_check({_PROBLEMS_SHOWN})").fetchall()
    except sqlite3.Error as exc:
        if stopped:
            log.debug("%s: quick_check stopped after %g s, nothing found so far", path, budget_s)
            return
        refused = damage_of(path, exc)
        if refused is None:
            raise
        raise refused from None
    finally:
        conn.set_progress_handler(None, 0)
    found = [str(r[0]) for r in rows]
    if found != ["ok"]:
        raise damaged(path, f"is damaged (quick_check: {'; '.join(found)})")


class _Checked:
    """The files checked in this process: each is checked (`refuse_empty`, WAL, damage,
    `quick_check`) at its first connection, in a plain one of its own. Thread-safe."""

    def __init__(self) -> None:
        self._paths: set[Path] = set()
        self._lock = threading.Lock()

    def check_once(self, path: Path, busy_timeout_s: float) -> None:
        """Check ``path`` unless it was (its directory made when missing). Blocking."""
        key = path.absolute()
        with self._lock:
            if key in self._paths:
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=busy_timeout_s, factory=_Configured)
            try:
                quick_check(conn, path)
            finally:
                conn.close()
            self._paths.add(key)


_CHECKED = _Checked()


@dataclass(frozen=True)
class FileCheck:
    """What `check_file` found of one database file: its problems (none: it is sound) and
    the schema version of each component."""

    path: Path
    problems: tuple[str, ...] = ()
    versions: Mapping[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_file(path: Path, known: Mapping[str, int]) -> FileCheck:
    """Check the database ``path`` without writing to it (read-only): ``PRAGMA
    integrity_check``, and each component's schema version against ``known`` (component →
    the version this simrun knows). Blocking."""
    if not path.exists():
        return FileCheck(path, ("there is no such file",))
    if not path.is_file():
        return FileCheck(path, ("it is not a file",))
    if path.stat().st_size == 0:
        return FileCheck(path, ("it is empty (0 bytes, as a failed copy or restore leaves it)",))
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return FileCheck(path, (f"it cannot be opened: {exc}",))
    try:
        return _check_open(conn, path, known)
    finally:
        conn.close()


def _check_open(conn: sqlite3.Connection, path: Path, known: Mapping[str, int]) -> FileCheck:
    try:
        rows = conn.execute(f"PRAGMA integrity_check({_PROBLEMS_SHOWN})").fetchall()
        tables = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'"
        ).fetchall()
        found = (
            conn.execute("SELECT component, version FROM schema_versions").fetchall()
            if tables
            else []
        )
    except sqlite3.Error as exc:
        what = _damage(exc)
        return FileCheck(path, (f"it {what}" if what else f"it cannot be read: {exc}",))
    problems = [f"integrity_check: {r[0]}" for r in rows if str(r[0]) != "ok"]
    if not tables:
        problems.append("it holds no simrun schema (no table schema_versions)")
    versions = {str(c): int(v) for c, v in found}
    for component, version in sorted(versions.items()):
        mine = known.get(component)
        if mine is not None and version > mine:
            problems.append(
                f"the {component!r} schema is at version {version}, newer than this simrun's "
                f"{mine}: upgrade simrun"
            )
    return FileCheck(path, tuple(problems), versions)


# -- the lock of the one writer ------------------------------------------------------------


def holder_line(command: str) -> str:
    """Who this process is, as a lock holds it: ``simrun service (pid 7 on host h since
    2026-12-02 02:53:01 UTC)``."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return f"{command} (pid {os.getpid()} on {socket.gethostname()} since {since})"


def shown_holder(who: str) -> str:
    """The holder a lock file names, as a message says it: its `holder_line`; the ``pid N``
    an older simrun wrote was a `simrun run`."""
    return who if who.startswith("`") else f"`simrun run` ({who})"


def hold(lock_path: Path, holder: str) -> IO[str]:
    """Take the lock ``lock_path`` (an ``flock``, made when missing, released however this
    process ends) for ``holder`` (a `holder_line`): the open lock file, whose closing
    releases it. `FileInUse` when another holds it. Blocking."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path.open("a+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        who = lock.read().strip() or "another process"
        lock.close()
        raise FileInUse(f"{lock_path} is held by {who}", who) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{holder}\n")
    lock.flush()
    return lock


def holder_of(lock_path: Path) -> str | None:
    """Who holds the lock ``lock_path`` (what its holder wrote), or None when it is free.
    Blocking."""
    try:
        lock = lock_path.open("r")
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock.read().strip() or "another process"
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        return None
