"""A store whose SQLite file is empty, cut short or not a database, as the commands meet it:
`simrun service`, `simrun run` and `simrun status --store` refuse it in one line naming the
file and what to do, and leave it as it is; `simrun store check` says what is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from simrun.local.machine import free_port
from tests.support.cli_harness import WORK, simrun, write_work
from tests.support.redis_server import key_prefix

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("store-damage")]


@pytest.fixture(scope="module")
def real_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite file of a real store: one `simrun run` of 4 units to its end."""
    home = tmp_path_factory.mktemp("real")
    write_work(home / "quick.yaml", name="quick", units=4, seconds=0.01)
    done = simrun("run", "quick.yaml", "--plugins", WORK, cwd=home)
    assert done.returncode == 0, done.stdout + done.stderr
    db = home / "simrun-store" / "simrun.db"
    assert db.stat().st_size > 8192
    return db


def _empty(real: Path, db: Path) -> None:
    db.write_bytes(b"")


def _truncated(real: Path, db: Path) -> None:
    data = real.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def _random(real: Path, db: Path) -> None:
    db.write_bytes(os.urandom(16384))


DAMAGES: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "empty": (_empty, "is empty (0 bytes"),
    "truncated": (_truncated, "is damaged (database disk image is malformed)"),
    "random": (_random, "is not a SQLite database (file is not a database)"),
}


def _damaged_store(tmp_path: Path, real: Path, damage: str) -> tuple[Path, Path, bytes]:
    """A copy of the real store (its run directories too) whose file has ``damage``: the
    store, its file, the file's bytes."""
    store = tmp_path / "store"
    shutil.copytree(real.parent, store)
    db = store / "simrun.db"
    DAMAGES[damage][0](real, db)
    return store, db, db.read_bytes()


def _refused_in_one_line(result: subprocess.CompletedProcess[str], db: Path, what: str) -> None:
    """The command failed with one error line naming ``db``, ``what`` is wrong with it and
    what to do, and no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, output
    (line,) = errors
    assert str(db) in line, line
    assert what in line, line
    assert "restore it from a backup" in line, line
    assert f"simrun store check {db}" in line, line
    assert "this is a bug" not in output, output


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_the_service_refuses_a_damaged_database_and_leaves_it(
    tmp_path: Path, real_db: Path, redis_url: str, damage: str
) -> None:
    """`simrun service` on a store whose file is empty, cut in half or random bytes exits
    non-zero at start with one line naming the file and what to do; the file is unchanged
    (an empty one is not made a new database)."""
    store, db, before = _damaged_store(tmp_path, real_db, damage)
    result = simrun(
        "service", "--port", str(free_port()), "--redis-url", redis_url,
        "--prefix", key_prefix("damage"), "--store", str(store), "--plugins", WORK,
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    _refused_in_one_line(result, db, DAMAGES[damage][1])
    assert db.read_bytes() == before


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_status_and_run_refuse_a_damaged_store_and_leave_it(
    tmp_path: Path, real_db: Path, damage: str
) -> None:
    """`simrun status --store`, `simrun resources --store`, `simrun run --store` and `simrun
    run --resume RUN --store` on a damaged file exit non-zero with one line naming it and
    what to do; the file is unchanged."""
    store, db, before = _damaged_store(tmp_path, real_db, damage)
    what = DAMAGES[damage][1]
    _refused_in_one_line(simrun("status", "--store", str(store), cwd=tmp_path), db, what)
    _refused_in_one_line(simrun("resources", "--store", str(store), cwd=tmp_path), db, what)
    write_work(tmp_path / "quick.yaml", name="quick", units=2, seconds=0.01)
    ran = simrun("run", "quick.yaml", "--plugins", WORK, "--store", str(store), cwd=tmp_path)
    _refused_in_one_line(ran, db, what)
    run_id = next((store / "runs").iterdir()).name
    resumed = simrun(
        "run", "--resume", run_id, "--plugins", WORK, "--store", str(store), cwd=tmp_path
    )
    _refused_in_one_line(resumed, db, what)
    assert db.read_bytes() == before


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_store_check_says_what_is_wrong(tmp_path: Path, real_db: Path, damage: str) -> None:
    """`simrun store check STORE` on a damaged file exits 1 saying what is wrong and to
    restore it; the file is unchanged."""
    store, db, before = _damaged_store(tmp_path, real_db, damage)
    result = simrun("store", "check", str(store), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{db}: NOT ok" in result.stdout
    assert DAMAGES[damage][1].removeprefix("is ") in result.stdout, result.stdout
    assert "restore it from a backup" in result.stdout
    assert "Traceback" not in result.stderr
    assert db.read_bytes() == before


def test_store_check_of_a_sound_store_and_of_its_file(tmp_path: Path, real_db: Path) -> None:
    """`simrun store check` of a sound store (the directory, or its file as a service's
    --db names it) exits 0 saying ok and the schema versions, and writes nothing to it."""
    store = tmp_path / "store"
    shutil.copytree(real_db.parent, store)
    db = store / "simrun.db"
    before = db.read_bytes()
    for given in (store, db):
        result = simrun("store", "check", str(given), cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.startswith(f"{db}: ok (integrity check ok; schema: "), result.stdout
        assert "runs 1" in result.stdout
    assert db.read_bytes() == before
    missing = simrun("store", "check", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 1
    assert "there is no such file" in missing.stdout
