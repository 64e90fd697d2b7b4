"""One check that a directory is a store of ``simrun run`` (`simrun.local.reads.store_db`),
the same for every command that reads or changes a store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from simrun.cli import logs, remote
from simrun.core.layout import StoreLayout
from simrun.local.machine import LocalError
from simrun.local.reads import open_store_reader, store_db
from simrun.local.start import check_run


async def _read(store: Path) -> None:
    async with open_store_reader(store):
        pass


#: Each caller of the check, on a directory.
CALLERS: dict[str, Callable[[Path], object]] = {
    "store_db": store_db,
    "simrun cancel --store": lambda s: asyncio.run(remote._cancel_in_store(s, "r1")),
    "simrun logs --store": logs.store_source,
    "simrun status --store": lambda s: asyncio.run(_read(s)),
    "simrun replay --store": lambda s: asyncio.run(check_run(s, "r1", None, {}, None)),
}


@pytest.mark.parametrize("caller", CALLERS.values(), ids=CALLERS.keys())
def test_a_directory_without_the_db_is_not_a_store_for_any_command(tmp_path, caller):
    """Every command that takes --store refuses a directory with no SQLite file, in one text
    naming the file and the --store to give."""
    db = StoreLayout(tmp_path).db
    with pytest.raises(LocalError) as refused:
        caller(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path} is not a simrun store (there is no {db}); give the --store that "
        "`simrun run` used"
    )


def test_a_store_is_its_db(tmp_path):
    """A directory with the store's SQLite file is a store: its file is returned."""
    db = StoreLayout(tmp_path).db
    db.parent.mkdir(parents=True, exist_ok=True)
    db.touch()
    assert store_db(tmp_path) == db
