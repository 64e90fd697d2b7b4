"""The layout of a store (simrun.core.layout): where its files live, spelled once."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.core.layout import (
    DB_NAME,
    InputRef,
    StoreLayout,
    split_task,
    task_logs,
    task_name_problem,
)
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


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("a.out", InputRef("task", "a", "out")),
        ("fit-v2.mesh", InputRef("task", "fit-v2", "mesh")),
        ("fit.v2.out", None),
        ("source:plate", InputRef("source", "plate")),
        ("source:plate.v2", InputRef("source", "plate.v2")),
        ("source:", None),
        ("a.", None),
        ("a.1x", None),
        (".out", None),
    ],
)
def test_input_references_parse(ref: str, parsed: InputRef | None) -> None:
    """References parse as task.port (split at the first dot: a task name holds none) or
    source:name; anything else is None."""
    assert InputRef.parse(ref) == parsed


@pytest.mark.parametrize("name", ["heat.sweep", "a.b.c", "source:x", "fit:2"])
def test_a_task_name_holds_no_separator_of_a_reference(name: str) -> None:
    """A task name with '.' or ':' is refused: references and --set could not name it."""
    why = task_name_problem(name)
    assert why is not None
    assert f"{name!r} contains" in why


@pytest.mark.parametrize("name", ["sweep", "fit-v2", "fit_2", "Heat2"])
def test_an_accepted_task_name_splits_back_from_every_reference(name: str) -> None:
    """For every accepted task name, its port reference and a --set's TASK.SETTING give the
    name back: the one split rule agrees with the one name rule."""
    assert task_name_problem(name) is None
    assert InputRef.parse(f"{name}.out") == InputRef("task", name, "out")
    assert split_task(f"{name}.solver.tol") == (name, "solver.tol")
