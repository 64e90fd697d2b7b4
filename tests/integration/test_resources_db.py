"""simrun.db on real SQLite files: connections, transactions, per-component migrations."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from simrun import db

STEPS_A = (
    db.Migration("things", ("CREATE TABLE a_things (id INTEGER PRIMARY KEY, name TEXT)",)),
    db.Migration(
        "things get a size",
        (
            "ALTER TABLE a_things ADD COLUMN size REAL",
            "CREATE INDEX a_things_by_size ON a_things (size)",
        ),
    ),
)
STEPS_B = (db.Migration("others", ("CREATE TABLE b_others (id INTEGER PRIMARY KEY)",)),)


def pragma(path: Path, name: str) -> object:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]


async def test_connect_creates_the_file_and_its_directory(tmp_path: Path) -> None:
    """connect creates missing directories and the file, in WAL mode with foreign keys on."""
    path = tmp_path / "deep" / "er" / "simrun.db"
    conn = await db.connect(path)
    try:
        assert path.is_file()
        rows = await conn.execute_fetchall("PRAGMA foreign_keys")
        assert next(iter(rows))[0] == 1
        rows = await conn.execute_fetchall("PRAGMA busy_timeout")
        assert next(iter(rows))[0] == int(db.DEFAULT_BUSY_TIMEOUT_S * 1000)
        assert conn.isolation_level is None
    finally:
        await conn.close()
    assert pragma(path, "journal_mode") == "wal"


async def test_migrations_apply_in_order_and_set_versions(tmp_path: Path) -> None:
    """Each component's steps run once, in order; user_version is the sum of versions."""
    path = tmp_path / "simrun.db"
    async with db.session(path) as conn:
        assert await db.component_version(conn, "a") == 0
        assert await db.migrate(conn, "a", STEPS_A[:1]) == 1
        assert await db.migrate(conn, "a", STEPS_A) == 2
        assert await db.migrate(conn, "a", STEPS_A) == 2  # nothing left to do
        assert await db.migrate(conn, "b", STEPS_B) == 1
        assert await db.component_version(conn, "a") == 2
        assert await db.component_version(conn, "b") == 1
    assert pragma(path, "user_version") == 3
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(a_things)")]
    assert columns == ["id", "name", "size"]


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A file migrated by a later simrun (more steps than known) is refused, by name."""
    path = tmp_path / "simrun.db"
    async with db.session(path) as conn:
        await db.migrate(conn, "a", STEPS_A)
        with pytest.raises(db.SchemaError, match=r"'a' schema .* version 2, .* up to 1"):
            await db.migrate(conn, "a", STEPS_A[:1])


async def test_failing_step_leaves_the_file_unchanged(tmp_path: Path) -> None:
    """A step that fails rolls back the whole migration: no table, no version."""
    path = tmp_path / "simrun.db"
    broken = (
        db.Migration("fine", ("CREATE TABLE c_fine (id INTEGER)",)),
        db.Migration("broken", ("CREATE TABLE c_more (id INTEGER)", "NOT SQL AT ALL")),
    )
    async with db.session(path) as conn:
        with pytest.raises(db.SchemaError, match=r"migration 2 of 'c' \(broken\) failed"):
            await db.migrate(conn, "c", broken)
        assert await db.component_version(conn, "c") == 0
        tables = await conn.execute_fetchall("SELECT name FROM sqlite_master WHERE name LIKE 'c_%'")
        assert list(tables) == []
        assert not conn.in_transaction


async def test_transaction_commits_or_rolls_back(tmp_path: Path) -> None:
    """transaction() commits at the end of the block and rolls back on an exception."""
    path = tmp_path / "simrun.db"
    async with db.session(path) as conn:
        await db.migrate(conn, "a", STEPS_A)
        async with db.transaction(conn):
            await conn.execute("INSERT INTO a_things (name) VALUES ('kept')")

        async def failing() -> None:
            async with db.transaction(conn):
                await conn.execute("INSERT INTO a_things (name) VALUES ('dropped')")
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await failing()
        rows = await conn.execute_fetchall("SELECT name FROM a_things")
    assert [r[0] for r in rows] == ["kept"]


async def test_nested_transaction_is_refused(tmp_path: Path) -> None:
    """Opening a transaction inside another one is an error, not a silent commit."""
    async with db.session(tmp_path / "simrun.db") as conn, db.transaction(conn):
        with pytest.raises(RuntimeError, match="already in a transaction"):
            async with db.transaction(conn):
                pass


def test_concurrent_migrations_from_threads_apply_once(tmp_path: Path) -> None:
    """Threads (each with its own event loop) migrating one new file at once all succeed
    and each step runs exactly once."""
    path = tmp_path / "simrun.db"
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    async def run() -> None:
        async with db.session(path) as conn:
            await db.migrate(conn, "a", STEPS_A)
            await db.migrate(conn, "b", STEPS_B)

    def thread() -> None:
        try:
            barrier.wait()
            asyncio.run(run())
        except BaseException as exc:  # noqa: BLE001  # kept, and asserted empty below
            errors.append(exc)

    threads = [threading.Thread(target=thread) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pragma(path, "user_version") == 3


def test_file_keeper_keeps_the_wal_between_connections(tmp_path: Path) -> None:
    """With a FileKeeper open, closing the other connections leaves the -wal file; closing
    the keeper (the last connection) checkpoints and removes it."""
    path = tmp_path / "simrun.db"

    async def touch() -> None:
        async with db.session(path) as conn:
            await db.migrate(conn, "a", STEPS_A)

    asyncio.run(touch())
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists()  # the last connection closed: WAL checkpointed and removed
    keeper = db.FileKeeper(path)
    keeper.open()
    assert keeper.is_open
    asyncio.run(touch())
    assert wal.exists()
    keeper.close()
    assert not keeper.is_open
    assert not wal.exists()
