"""The layout of a store (simrun.core.layout): where its files live, spelled once."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.core.layout import DB_NAME, StoreLayout, task_logs
from simrun.plugins import TaskPaths

ROOT = Path("/data/store")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (StoreLayout(ROOT).db, "simrun.db"),
        (StoreLayout(ROOT).lock, ".simrun.lock"),
        (StoreLayout(ROOT).logs, "logs"),
        (StoreLayout(ROOT).runs, "runs"),
        (StoreLayout(ROOT).run_dir("r1"), "runs/r1"),
        (StoreLayout(ROOT).sources("r1"), "runs/r1/sources"),
        (StoreLayout(ROOT).task_dir("r1", "sweep"), "runs/r1/sweep"),
        (StoreLayout(ROOT).task_out("r1", "sweep"), "runs/r1/sweep/out"),
        (task_logs(StoreLayout(ROOT).task_dir("r1", "sweep")), "runs/r1/sweep/logs"),
    ],
)
def test_store_layout(path: Path, expected: str) -> None:
    """Every file and directory of a store has its documented place under the root."""
    assert path == ROOT / expected
    assert DB_NAME == "simrun.db"


def test_task_paths_are_those_of_the_plugins_spec() -> None:
    """The layout's task directories are TaskPaths.for_task's (the task types' spec), with
    inputs and scratch passed through."""
    layout = StoreLayout(ROOT)
    inputs = {"plate": ROOT / "runs" / "r1" / "sources" / "plate"}
    got = layout.task_paths("r1", "sweep", inputs=inputs)
    assert got == TaskPaths.for_task(ROOT, "r1", "sweep", inputs)
    assert got.run_dir == layout.run_dir("r1")
    assert got.task_dir == layout.task_dir("r1", "sweep")
    assert got.out == layout.task_out("r1", "sweep")
    assert layout.task_paths("r1", "sweep", scratch=Path("/tmp/s")).scratch == Path("/tmp/s")
