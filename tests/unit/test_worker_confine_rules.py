"""`simrun.worker.jobs.confine`: the one check of a job against what its worker has (its
installed types, its store, its local scratch, its queues), a table of payloads a sender
may forge. The files are a temporary store (symlinks are what `..` is to a path)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.sizing import image_queue
from simrun.plugins import TaskPaths
from simrun.worker.jobs import confine
from simrun.worker.pool.protocol import InstalledType

RUN = "20260101-000000-a1"
INSTALLED = {
    "sleep": InstalledType("sleep"),
    "echo": InstalledType("echo", command="echo {out}"),
    "broken": InstalledType("broken", problem="cannot import module 'gone'"),
}
SERVED = ("cpu", image_queue("solver:1"))

Edit = Callable[[dict[str, Any], Path], dict[str, Any]]


def _paths(**changes: object) -> Edit:
    def edit(data: dict[str, Any], root: Path) -> dict[str, Any]:
        found = {k: str(v).replace("ROOT", str(root)) for k, v in changes.items()}
        return {**data, "paths": {**data["paths"], **found}}

    return edit


def _inputs(where: str) -> Edit:
    def edit(data: dict[str, Any], root: Path) -> dict[str, Any]:
        inputs = {"data": where.replace("ROOT", str(root))}
        return {**data, "paths": {**data["paths"], "inputs": inputs}}

    return edit


def _fields(**changes: object) -> Edit:
    def edit(data: dict[str, Any], root: Path) -> dict[str, Any]:
        return {**data, **changes, "job_id": None}

    return edit


def _command(data: dict[str, Any], root: Path) -> dict[str, Any]:
    return {**data, "kind": "command", "ranges": [], "job_id": None}


def _both(*edits: Edit) -> Edit:
    def edit(data: dict[str, Any], root: Path) -> dict[str, Any]:
        for one in edits:
            data = one(data, root)
        return data

    return edit


STORE_RUN = f"ROOT/store/runs/{RUN}"
CASES: list[tuple[str, Edit, str | None]] = [
    ("as the service sends it", _fields(), None),
    ("a command job of a type with a command", _both(_command, _fields(task_type="echo")), None),
    ("scratch in the worker's local scratch", _paths(scratch="ROOT/local/x/t"), None),
    ("an input of another task of the run", _inputs(f"{STORE_RUN}/up/out"), None),
    ("an image this worker serves", _fields(image="solver:1"), None),
    ("a type not installed", _fields(task_type="evil"), "'evil' is not installed here"),
    ("a type that does not load", _fields(task_type="broken"), "cannot be loaded here"),
    ("a command job of a type without one", _command, "'sleep' has no command"),
    ("a chunk job of a command type", _fields(task_type="echo"), "'echo' runs a command"),
    ("an image not served", _fields(image="evil:1"), "image 'evil:1'"),
    (
        "GPUs on a cpu worker",
        _fields(resources={"memory_base_gb": 1, "memory_per_worker_gb": 1, "gpus": 1}),
        "'gpu'",
    ),
    ("a run that is no run id", _fields(run="r1"), "run 'r1' is not a run id"),
    ("a run that climbs", _fields(run=f"{RUN}/../.."), "is not a run id"),
    ("a task that climbs", _fields(task=".."), "task name"),
    ("a task with a slash", _fields(task="a/b"), "task name"),
    ("another store", _paths(store="ROOT/outside"), "is not this worker's store"),
    ("another run_dir", _paths(run_dir="ROOT/outside"), "its run_dir"),
    ("another task_dir", _paths(task_dir=f"{STORE_RUN}/other"), "its task_dir"),
    ("an out elsewhere", _paths(out="ROOT/outside/out"), "its out"),
    ("an out that climbs", _paths(out=f"{STORE_RUN}/t/../../../../outside"), "its out"),
    ("an input elsewhere", _inputs("ROOT/outside/data"), "input 'data'"),
    ("an input that climbs", _inputs(f"{STORE_RUN}/../../../outside"), "input 'data'"),
    ("an input through a symlink out", _inputs(f"{STORE_RUN}/sources/link"), "leads to"),
    ("an input of the store's database", _inputs("ROOT/store/simrun.db"), "outside the store's"),
    ("a scratch elsewhere", _paths(scratch="ROOT/outside/s"), "its scratch"),
    ("a task_dir that is a symlink out", _fields(task="linked"), "its task_dir"),
]


def _base(store: Path) -> dict[str, Any]:
    paths = TaskPaths.for_task(store, RUN, "t", inputs={"data": store / "runs" / RUN / "src"})
    spec = JobSpec(
        kind="chunk",
        run=RUN,
        task="t",
        task_type="sleep",
        settings={},
        paths=JobPaths.of(paths),
        resources=JobResources(memory_base_gb=0.1, memory_per_worker_gb=0.1),
        indices=(0, 1),
    )
    return spec.to_dict()


@pytest.mark.parametrize(("name", "edit", "expected"), CASES, ids=[c[0] for c in CASES])
def test_confine(tmp_path: Path, name: str, edit: Edit, expected: str | None) -> None:
    """A job runs on a worker only when its type is installed (and of its kind), its run
    and task are names, its queue is served and every path is where the worker's store
    puts the task (or its scratch under the worker's local scratch): `confine` gives
    None, else the reason; `..` and symlinks count where they lead."""
    store, outside = tmp_path / "store", tmp_path / "outside"
    (store / "runs" / RUN / "sources").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, store / "runs" / RUN / "sources" / "link")
    os.symlink(outside, store / "runs" / RUN / "linked")
    data = edit(_base(store), tmp_path)
    if name == "a task_dir that is a symlink out":  # the layout's paths, through the link
        layout = TaskPaths.for_task(store, RUN, "linked")
        data["paths"].update(JobPaths.of(layout).model_dump(exclude={"inputs"}))
    spec = JobSpec.from_dict(data)
    # the worker's store given through a symlink is the same store
    os.symlink(store, tmp_path / "store-link")
    problem = confine(spec, tmp_path / "store-link", tmp_path / "local", INSTALLED, SERVED)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert expected in problem, problem
