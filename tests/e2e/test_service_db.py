"""The service's SQLite file apart from the store (``--db`` / ``SIMRUN_DB``), and its refusal
of a database on a network file system unless ``--db-on-network-fs`` is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.local.machine import free_port
from simrun.service.main import DatabaseVolumeError, check_database
from tests.support.cli_harness import WORK, clean_env, start_simrun, stop_process, wait_for_service
from tests.support.redis_server import key_prefix

pytestmark = pytest.mark.e2e


def test_the_service_keeps_its_database_where_simrun_db_says(
    tmp_path: Path, redis_url: str
) -> None:
    """`simrun service` with SIMRUN_DB set writes its SQLite file there (its directory made)
    and none into the store the workers share."""
    store, db = tmp_path / "store", tmp_path / "local" / "db" / "simrun.db"
    port = free_port()
    env = clean_env(SIMRUN_DB=str(db))
    svc = start_simrun(
        "service", "--port", str(port), "--redis-url", redis_url, "--prefix", key_prefix("db"),
        "--store", str(store), "--plugins", WORK, cwd=tmp_path, env=env,
    )  # fmt: skip
    try:
        wait_for_service(f"http://127.0.0.1:{port}", svc, timeout_s=30)
        assert db.is_file()
        assert not (store / "simrun.db").exists()
    finally:
        stop_process(svc)


def test_a_database_on_a_network_file_system_is_refused_unless_told(tmp_path: Path) -> None:
    """A database whose directory is on an NFS mount (as the mount table says) is refused
    with one line naming the file, the file system type and the two ways out; with
    on_network_fs the service goes on."""
    mounts = tmp_path / "mounts"
    mounts.write_text(f"overlay / overlay rw 0 0\nsrv:/e {tmp_path / 'nfs'} nfs4 rw 0 0\n")
    db = tmp_path / "nfs" / "store" / "simrun.db"
    with pytest.raises(DatabaseVolumeError) as caught:
        check_database(db, mounts_file=mounts)
    message = str(caught.value)
    assert str(db) in message
    assert "(nfs4)" in message
    assert "--db PATH or SIMRUN_DB" in message
    assert "--db-on-network-fs" in message
    assert "\n" not in message
    assert not db.parent.exists()
    check_database(db, on_network_fs=True, mounts_file=mounts)
    assert db.parent.is_dir()
    check_database(tmp_path / "local" / "simrun.db", mounts_file=mounts)
