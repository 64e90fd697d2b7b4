"""The layout of a store on disk (simrun.core.layout): what makes a directory a store."""

from __future__ import annotations

from pathlib import Path

from simrun.core.layout import StoreLayout


def test_is_store_means_the_database_exists(tmp_path: Path) -> None:
    """A directory is a store once a service has made its SQLite file there, not before
    (an empty or unrelated directory is not)."""
    layout = StoreLayout(tmp_path)
    assert not layout.is_store()
    (tmp_path / "runs").mkdir()
    assert not layout.is_store()
    layout.db.write_bytes(b"")
    assert layout.is_store()
    assert not StoreLayout(tmp_path / "missing").is_store()


def test_a_session_log_is_rotated_past_its_size_and_never_overwritten(tmp_path: Path) -> None:
    """`rotate_log` leaves a log under its size alone; past it, the log becomes ``.1``
    (``.1`` becomes ``.2``) and the oldest past the number kept goes; nothing is lost
    below that number."""
    from simrun.local.session import rotate_log

    log = tmp_path / "worker-1.log"
    log.write_text("small\n")
    rotate_log(log, max_bytes=100, backups=2)
    assert log.read_text() == "small\n"
    for n in range(3):
        log.write_text(f"session {n} " + "x" * 100)
        rotate_log(log, max_bytes=100, backups=2)
        assert not log.exists()
    assert (tmp_path / "worker-1.log.1").read_text().startswith("session 2 ")
    assert (tmp_path / "worker-1.log.2").read_text().startswith("session 1 ")
    assert not (tmp_path / "worker-1.log.3").exists()
    rotate_log(tmp_path / "absent.log")  # nothing to rotate: nothing happens
