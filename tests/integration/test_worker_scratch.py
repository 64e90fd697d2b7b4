"""A worker's local scratch and staged inputs (`simrun.worker.scratch`), on real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.wire import PayloadError
from simrun.plugins import TaskPaths
from simrun.worker import scratch as scratch_mod
from simrun.worker.scratch import ScratchSpace, scratch_root, usage_bytes


def job(store: Path, staged: tuple[str, ...] = ("data",), run: str = "r1") -> JobSpec:
    source = store / "runs" / run / "sources" / "data"
    upstream = store / "runs" / run / "up" / "out"
    paths = TaskPaths.for_task(store, run, "t", inputs={"data": source, "table": upstream})
    return JobSpec(
        kind="chunk",
        run=run,
        task="t",
        task_type="x",
        settings={},
        paths=JobPaths.of(paths),
        resources=JobResources(memory_base_gb=1.0, memory_per_worker_gb=1.0),
        indices=(0,),
        staged=staged,
    )


def fill(store: Path, run: str = "r1") -> None:
    source = store / "runs" / run / "sources" / "data"
    (source / "deep").mkdir(parents=True)
    (source / "plate.json").write_text("{}")
    (source / "deep" / "a.bin").write_bytes(b"x" * 1000)
    (store / "runs" / run / "up" / "out").mkdir(parents=True)


def test_localize_puts_scratch_and_staged_ports_on_the_worker(tmp_path: Path) -> None:
    """A job's scratch becomes ``<root>/<run>/<task>`` and each staged port
    ``<scratch>/<port>``; a port not staged keeps its store path."""
    spec = job(tmp_path / "store")
    local = ScratchSpace(tmp_path / "scratch").localize(spec)
    assert local.paths.scratch == str(tmp_path / "scratch" / "r1" / "t")
    assert local.paths.inputs["data"] == str(tmp_path / "scratch" / "r1" / "t" / "data")
    assert local.paths.inputs["table"] == spec.paths.inputs["table"]
    assert local.job_id == spec.job_id


async def test_staging_copies_once_and_says_what_it_took(tmp_path: Path) -> None:
    """The first job of a task copies its staged port (a directory, whole) and reports the
    bytes; the jobs after it, even arriving together, copy nothing; what the task writes is
    counted apart from the staged copy."""
    store = tmp_path / "store"
    fill(store)
    space = ScratchSpace(tmp_path / "scratch")
    spec = job(store)
    results = await asyncio.gather(*(space.prepare(spec) for _ in range(3)))
    assert sorted(r.bytes for r in results) == [0, 0, 1002]
    copy = tmp_path / "scratch" / "r1" / "t" / "data"
    assert (copy / "deep" / "a.bin").read_bytes() == b"x" * 1000
    assert (copy / "plate.json").read_text() == "{}"
    assert space.used_bytes(spec) == 0
    (tmp_path / "scratch" / "r1" / "t" / "w.bin").write_bytes(b"y" * 500)
    assert space.used_bytes(spec) == 500
    assert usage_bytes(tmp_path / "scratch" / "r1" / "t") == 1502


async def test_a_staged_port_that_cannot_be_read_raises(tmp_path: Path) -> None:
    """A staged input missing from the store is an OSError (the job's units fail with it)."""
    space = ScratchSpace(tmp_path / "scratch")
    with pytest.raises(OSError, match="No such file"):
        await space.prepare(job(tmp_path / "store"))


async def test_sweep_removes_ended_and_idle_tasks_but_not_running_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scratch of a task goes once its jobs here ended and the service says it ended,
    or once it was idle for IDLE_REMOVE_S; a task with a job running keeps it."""
    store = tmp_path / "store"
    fill(store, "r1")
    fill(store, "r2")
    space = ScratchSpace(tmp_path / "scratch")
    one, two = job(store, run="r1"), job(store, run="r2")
    await space.prepare(one)
    await space.prepare(two)

    async def ended(tasks: list[tuple[str, str]]) -> set[tuple[str, str]]:
        return {("r1", "t"), ("r2", "t")} & set(tasks)

    assert await space.sweep(ended) == 0  # both still running
    space.end(one)
    assert await space.sweep(ended) == 1
    assert not (tmp_path / "scratch" / "r1").exists()
    assert (tmp_path / "scratch" / "r2" / "t" / "data").is_dir()

    async def nothing(tasks: list[tuple[str, str]]) -> set[tuple[str, str]]:
        return set()

    space.end(two)
    assert await space.sweep(nothing) == 0  # ended a moment ago, not said to have ended
    monkeypatch.setattr(scratch_mod, "IDLE_REMOVE_S", -1.0)
    assert await space.sweep(nothing) == 1
    assert not (tmp_path / "scratch" / "r2").exists()


def test_a_job_staging_a_port_it_has_not_is_refused(tmp_path: Path) -> None:
    """A job whose ``staged`` names a port without an input is refused, built or read."""
    with pytest.raises(ValueError, match="'staged' names a port"):
        job(tmp_path, staged=("nope",))
    data = job(tmp_path).to_dict()
    with pytest.raises(PayloadError, match="'staged' names a port"):
        JobSpec.from_dict({**data, "staged": ["nope"]})


async def test_the_scratch_of_workers_gone_is_removed_and_of_live_ones_kept(
    tmp_path: Path,
) -> None:
    """Several workers may share a scratch directory, each in its own ``<worker id>/``;
    at start a worker removes the directories of the workers that are not alive (no
    heartbeat: an earlier incarnation of itself), and keeps those of live ones."""
    shared = tmp_path / "scratch"
    mine = ScratchSpace(scratch_root(shared, "w-new"))
    (shared / "w-old" / "r0" / "t").mkdir(parents=True)
    (shared / "w-live" / "r0" / "t").mkdir(parents=True)
    (mine.root / "r1").mkdir(parents=True)

    async def alive(ids: list[str]) -> set[str]:
        return {"w-live"} & set(ids)

    assert await mine.remove_dead(alive) == 1
    assert sorted(p.name for p in shared.iterdir()) == ["w-live", "w-new"]
    assert scratch_root(shared, "a/b") == shared / "a_b"  # an id is one directory
