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
