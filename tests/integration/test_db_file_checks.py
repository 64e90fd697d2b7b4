"""The checks of a SQLite file at open (`simrun.db.connect`, `RunStore.open`) and by
`simrun.db.check_file`, on real files: an empty, cut, random or partly overwritten file is
refused with `DamagedDatabase` and left as it is; a missing one is still created; and the
writer's lock (`simrun.db.hold`) names its holder."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from simrun import db
from simrun.resources import ResourceStore
from simrun.runstore.store import RunStore


def _sound(path: Path, rows: int = 3000) -> Path:
    """A WAL database of one indexed table, checkpointed into the file."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("CREATE INDEX t_v ON t (v)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (v) VALUES (?)", [(f"value {i} " * 8,) for i in range(rows)])
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "cut":
        path.write_bytes(data[: len(data) // 2])
    elif how == "random":
        path.write_bytes(os.urandom(8192))
    else:  # pages in the middle overwritten: the header is sound, the open succeeds
        middle = len(data) // 2 // 4096 * 4096
        path.write_bytes(data[:middle] + os.urandom(3 * 4096) + data[middle + 3 * 4096 :])


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("how", ["empty", "cut", "random", "overwritten"])
async def test_a_damaged_file_is_refused_and_left_as_it_is(tmp_path: Path, how: str) -> None:
    """`RunStore.open` (as the service, `simrun run` and the read commands open a store) of
    an empty, cut, random or partly overwritten file raises `DamagedDatabase`, one line
    naming the file, and writes nothing to it (no -wal either)."""
    path = _sound(tmp_path / "simrun.db")
    _damage(path, how)
    before = path.read_bytes()
    with pytest.raises(db.DamagedDatabase) as caught:
        await RunStore.open(path)
    message = str(caught.value)
    assert message.startswith(f"the database {path} is ")
    assert "\n" not in message
    assert f"simrun store check {path}" in message
    assert _files(tmp_path) == {"simrun.db": before}


async def test_a_missing_file_is_created_and_a_sound_one_opens(tmp_path: Path) -> None:
    """A file that is not there yet is created (a new store), its directory too; it opens
    again, and a resource store on it reads it."""
    path = tmp_path / "new" / "simrun.db"
    store = await RunStore.open(path)
    await store.close()
    assert path.stat().st_size > 0
    again = await RunStore.open(path)
    await again.close()
    assert await ResourceStore(path, keep_open=False).keys() == []


def test_quick_check_finds_overwritten_pages_and_stops_at_its_budget(tmp_path: Path) -> None:
    """`quick_check` finds pages overwritten in the middle of a file whose first page is
    sound; with no time to spend it stops without a verdict."""
    path = _sound(tmp_path / "x.db")
    _damage(path, "overwritten")
    conn = sqlite3.connect(path)
    try:
        db.quick_check(conn, path, budget_s=0)
        with pytest.raises(db.DamagedDatabase, match="is damaged"):
            db.quick_check(conn, path)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("empty", "it is empty (0 bytes"),
        ("cut", "it is damaged (database disk image is malformed)"),
        ("random", "it is not a SQLite database (file is not a database)"),
        ("overwritten", ("integrity_check: ", "it is damaged (")),
    ],
)
def test_check_file_says_what_is_wrong_without_writing(
    tmp_path: Path, how: str, said: str | tuple[str, ...]
) -> None:
    """`check_file` of a damaged file says what is wrong (the integrity check's own words
    for overwritten pages) and leaves the file's bytes as they were."""
    path = _sound(tmp_path / "x.db")
    _damage(path, how)
    before = path.read_bytes()
    found = db.check_file(path, {"runs": 1})
    assert not found.ok
    assert any(p.startswith(said) for p in found.problems), found.problems
    assert path.read_bytes() == before


async def test_check_file_of_a_sound_store_and_of_a_newer_schema(tmp_path: Path) -> None:
    """A store's sound file is ok, with its components' versions; one whose schema is newer
    than this simrun knows is not ok, naming the component."""
    path = tmp_path / "simrun.db"
    store = await RunStore.open(path)
    await store.close()
    found = db.check_file(path, {"runs": 1})
    assert found.ok, found.problems
    assert found.versions == {"runs": 1}
    newer = db.check_file(path, {"runs": 0})
    assert newer.problems == (
        "the 'runs' schema is at version 1, newer than this simrun's 0: upgrade simrun",
    )
    plain = _sound(tmp_path / "plain.db")
    assert db.check_file(plain, {}).problems == (
        "it holds no simrun schema (no table schema_versions)",
    )


def test_the_writer_lock_names_its_holder_until_it_is_released(tmp_path: Path) -> None:
    """`hold` writes its holder into the lock; a second `hold` raises `FileInUse` with that
    holder, `holder_of` says it; once closed, the lock is free again."""
    lock_path = tmp_path / "store" / ".simrun.lock"
    me = db.holder_line("`simrun service`")
    assert me.startswith(f"`simrun service` (pid {os.getpid()} on ")
    held = db.hold(lock_path, me)
    try:
        with pytest.raises(db.FileInUse) as caught:
            db.hold(lock_path, db.holder_line("`simrun run`"))
        assert caught.value.holder == me
        assert db.holder_of(lock_path) == me
    finally:
        held.close()
    assert db.holder_of(lock_path) is None
    db.hold(lock_path, me).close()
