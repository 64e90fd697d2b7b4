"""What a unit does beyond its own process stays inside the worker's bounds (issue 11,
items 7-9): the children it starts count toward its memory limit and end with it, however
they try to escape; a kill by the kernel's OOM killer is reported as a kill for memory
with the limit; and what it prints reaches the worker's log only up to a cap.

Real burst worker containers (real worker processes, real Redis), the task types of
`tests.support.mem_tasks`."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from simrun.core.jobs import JobSpec
from simrun.core.reports import ReportEntry
from simrun.queues.client import JobQueue
from simrun.worker.capacity import Capacity
from simrun.worker.container import WorkerContainer
from simrun.worker.settings import Machine, WorkerSettings, worker_argv
from tests.support import REPO
from tests.support.harness import all_reports, make_spec, run_id, spawn
from tests.support.keys import TEST_KEY, TEST_KEY_ENV
from tests.support.mem_tasks import REFS
from tests.support.procs import alive

pytestmark = pytest.mark.e2e

GIB = 2**30


def cgroups_here() -> str | None:
    """Why this machine gives a worker no memory cgroups, None when it does."""
    from simrun.worker.cgroups import detect  # the module is new on this branch

    found = detect()
    return None if found.usable else found.reason


def child_pid(spec: JobSpec, index: int) -> int:
    """The pid the child of unit ``index`` wrote (it writes it before anything else)."""
    return int((Path(spec.paths.out) / f"child-{index}.pid").read_text())


async def burst(
    redis_url: str, prefix: str, specs: list[JobSpec], **more: Any
) -> dict[str, ReportEntry]:
    """Run ``specs`` on a burst container loading the types of tests.support.mem_tasks."""
    queue = await JobQueue.connect(redis_url, prefix, key=TEST_KEY)
    try:
        assert all(await queue.enqueue_many(specs))
        settings = WorkerSettings(
            redis_url=redis_url,
            prefix=prefix,
            plugins=REFS,
            python_path=(str(REPO),),
            burst=True,
            poll_delay_s=0.01,
            store=Path(specs[0].paths.store),
            **more,
        )
        machine = Machine(Capacity(memory_gb=4.0, processes=2))
        await asyncio.wait_for(WorkerContainer(settings, machine, TEST_KEY).run(), 90)
        return await all_reports(queue)
    finally:
        await queue.close()


def spawn_jobs(store: Path) -> dict[str, JobSpec]:
    """Per kind of escape: a unit whose 700 MiB child breaks its 0.25 GiB limit, one whose
    150 MiB child fits its 0.5 GiB, and one whose child outlives the unit's timeout."""
    jobs: dict[str, JobSpec] = {}
    for escape in ("none", "setsid", "double_fork"):
        jobs[f"big-{escape}"] = make_spec(
            store, f"big-{escape}", "mem-spawn", [0],
            {"child_mb": 700, "escape": escape, "seconds": 5.0}, memory_gb=0.25,
        )  # fmt: skip
        jobs[f"fits-{escape}"] = make_spec(
            store, f"fits-{escape}", "mem-spawn", [0],
            {"child_mb": 150, "escape": escape, "seconds": 0.5}, memory_gb=0.5,
        )  # fmt: skip
        jobs[f"slow-{escape}"] = make_spec(
            store, f"slow-{escape}", "mem-spawn", [0],
            {"child_mb": 10, "escape": escape, "seconds": 60.0}, memory_gb=0.5, timeout_s=2.0,
        )  # fmt: skip
    return jobs


def check_spawn_reports(jobs: dict[str, JobSpec], reports: dict[str, ReportEntry]) -> None:
    for escape in ("none", "setsid", "double_fork"):
        big = reports[jobs[f"big-{escape}"].job_id]
        assert big.outcomes == {0: "killed"}, (escape, big.outcomes, big.errors)
        assert big.report.killed_for_memory is True
        assert big.report.limit_gb == pytest.approx(0.25)
        fits = reports[jobs[f"fits-{escape}"].job_id]
        assert fits.outcomes == {0: "done"}, (escape, fits.errors)
        # Measured: the 150 MiB of the child count (its parent alone holds about 19 MiB).
        assert fits.report.peak_memory_gb[0] > 150 / 1024, (escape, fits.report)
        slow = reports[jobs[f"slow-{escape}"].job_id]
        assert slow.outcomes == {0: "timeout"}, (escape, slow.errors)
        for name in ("big", "fits", "slow"):
            spec = jobs[f"{name}-{escape}"]
            pid_file = Path(spec.paths.out) / "child-0.pid"
            if pid_file.exists():  # a child killed by the kernel may not have written it
                pid = child_pid(spec, 0)
                assert not alive(pid), f"the child {pid} of {name}-{escape} outlived its unit"


async def test_children_of_a_unit_count_toward_its_limit_and_end_with_it(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """With the worker's default isolation (a memory cgroup per worker process where the
    kernel allows it, else the process tree), a unit's child, also one in a new session or
    orphaned by a double fork, is measured (its memory is in the unit's peak), kills the
    unit when it breaks the unit's limit, and is not alive after the unit is done, killed
    or timed out."""
    jobs = spawn_jobs(tmp_path)
    reports = await burst(redis_url, redis_prefix, list(jobs.values()))
    check_spawn_reports(jobs, reports)


async def test_the_process_tree_alone_also_catches_escaping_children(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Without cgroups (``cgroups="off"``, what a worker falls back to where the kernel
    gives it none), the tree of the worker process, a child subreaper, still holds children
    in new sessions and double-forked orphans: they are measured, killed and ended alike."""
    jobs = spawn_jobs(tmp_path)
    reports = await burst(redis_url, redis_prefix, list(jobs.values()), cgroups="off")
    check_spawn_reports(jobs, reports)


async def test_a_kernel_oom_kill_is_a_kill_for_memory_with_the_limit(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Memory the sampler does not see (600 MiB of shared anonymous memory under a 0.25 GiB
    limit; the sampler counts RssAnon) is stopped by the kernel at the cgroup's limit; the
    worker reads the cgroup's OOM kill counter and reports the unit killed for memory with
    the limit it ran under, so the service retries it with RETRY_FACTOR times that limit."""
    why = cgroups_here()
    if why is not None:
        pytest.skip(f"no memory cgroup for the worker processes here: {why}")
    spike = make_spec(tmp_path, "spike", "mem-spike", [0, 1], {"spike_mb": 600}, memory_gb=0.25)
    reports = await burst(redis_url, redis_prefix, [spike])
    entry = reports[spike.job_id]
    assert entry.outcomes == {0: "killed", 1: "not_run"}, entry.errors
    assert entry.report.killed_for_memory is True
    assert entry.report.limit_gb == pytest.approx(0.25)
    assert "kernel" in entry.errors[0], entry.errors[0]
    assert "OOM" in entry.errors[0], entry.errors[0]


def test_what_units_print_is_capped_in_their_logs_and_one_line_each_in_the_worker_log(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Four units writing 4 MiB to stdout and 4 MiB to stderr each keep about the per-unit
    cap (1 MiB by default) in their own logs, not 8 MiB: each unit's output keeps its head
    and its tail and a line says how many bytes were dropped. The worker container's log
    gets one line per unit, naming the unit's log, and none of the output."""
    store = tmp_path / "store"
    specs = [
        make_spec(store, f"chatty-{i}", "mem-chatty", [i], {"mb": 4}, run=run_id(redis_prefix))
        for i in range(4)
    ]

    async def enqueue() -> None:
        queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
        try:
            assert all(await queue.enqueue_many(specs))
        finally:
            await queue.close()

    asyncio.run(enqueue())
    flags = WorkerSettings(
        redis_url=redis_url, prefix=redis_prefix, plugins=REFS, python_path=(str(REPO),),
        poll_delay_s=0.01, processes=2, memory_gb=2.0, burst=True, store=store,
    )  # fmt: skip
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        proc = spawn(worker_argv(flags), TEST_KEY_ENV, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log_path.read_bytes()
    assert log_path.stat().st_size < 64 * 1024, f"the worker log grew by {len(text)} bytes"
    assert b"HEAD out" not in text
    for i, spec in enumerate(specs):
        (unit_log,) = (Path(spec.paths.task_dir) / "logs" / "units").glob("unit-*.log")
        kept = unit_log.read_bytes()
        assert len(kept) < 1.1 * 2**20, f"unit {i} kept {len(kept)} bytes"
        assert f"HEAD out {i}\n".encode() in kept
        assert f"TAIL err {i}\n".encode() in kept
        assert b"dropped" in kept
        assert text.count(str(unit_log).encode()) == 1, text[-2000:]
