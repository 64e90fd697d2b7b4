"""Helpers of the worker tests and benchmark: building jobs, running a worker container in
this process (burst mode, real Redis, real worker processes) or as a child process, and
reading what it reported."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.reports import ReportEntry
from simrun.plugins import TaskPaths
from simrun.queues.client import JobQueue
from simrun.worker.capacity import Capacity
from simrun.worker.container import WorkerContainer
from simrun.worker.settings import Machine, WorkerSettings, worker_argv
from tests.support import REPO
from tests.support.keys import TEST_KEY, TEST_KEY_ENV

TASKS = "tests.support.tasks"
PLUGINS = tuple(
    f"{TASKS}:{name}" for name in ("SLEEP", "SPIN", "NOOP", "HOG", "FLAKY", "CRASH", "COPY")
) + tuple(
    f"tests.support.command_tasks:{name}"
    for name in ("ECHO", "TIMED", "PRINTS", "CHATTY", "ESCAPE")
)
#: The run of the jobs `make_spec` makes unless told (a worker runs only run ids).
RUN = "20260101-000000-a1"


def run_id(seed: str) -> str:
    """A run id of its own for ``seed`` (a test's Redis prefix, say)."""
    return f"20260101-000000-{hashlib.sha256(seed.encode()).hexdigest()[:10]}"


def make_spec(
    store: Path,
    task: str,
    task_type: str,
    indices: Sequence[int] = (),
    settings: dict[str, Any] | None = None,
    *,
    run: str = RUN,
    kind: str = "chunk",
    memory_gb: float = 0.5,
    base_gb: float = 0.5,
    gpus: int = 0,
    attempt: int = 1,
    timeout_s: float | None = None,
    inputs: dict[str, Path] | None = None,
    uses_cores: bool = False,
    checkpoints: bool = False,
) -> JobSpec:
    """A job of task ``task`` of run ``run`` in the store ``store``."""
    paths = TaskPaths.for_task(store, run, task, inputs=inputs)
    return JobSpec(
        kind=kind,  # type: ignore[arg-type]  # tests pass the literals
        run=run,
        task=task,
        task_type=task_type,
        settings=dict(settings or {}),
        paths=JobPaths.of(paths),
        resources=JobResources(memory_base_gb=base_gb, memory_per_worker_gb=memory_gb, gpus=gpus),
        attempt=attempt,
        indices=tuple(indices),
        timeout_s=timeout_s,
        uses_cores=uses_cores,
        checkpoints=checkpoints,
    )


def make_container(
    redis_url: str,
    prefix: str,
    *,
    memory_gb: float = 2.0,
    processes: int = 2,
    gpu_ids: tuple[str, ...] = (),
    queues: tuple[str, ...] = ("cpu",),
    **more: Any,
) -> WorkerContainer:
    """A burst-mode container that loads the test task types (its ``store`` is where the
    jobs' paths must be: ``store=...`` in ``more``)."""
    settings = WorkerSettings(
        redis_url=redis_url,
        queues=queues,
        prefix=prefix,
        plugins=PLUGINS,
        python_path=(str(REPO),),
        burst=True,
        poll_delay_s=0.01,
        **more,
    )
    capacity = Capacity(memory_gb=memory_gb, processes=processes, gpu_ids=gpu_ids)
    return WorkerContainer(settings, Machine(capacity), TEST_KEY)


async def all_reports(queue: JobQueue) -> dict[str, ReportEntry]:
    """Every report in the stream so far, by job id (read and acknowledged)."""
    found: dict[str, ReportEntry] = {}
    while True:
        batch = await queue.read_reports("tests", "t1", count=500, block_ms=None)
        if not batch:
            return found
        for item in batch:
            assert item.entry is not None, item.problem
            found[item.entry.job_id] = item.entry
        await queue.ack("tests", [item.id for item in batch])


async def run_burst(
    redis_url: str, prefix: str, specs: Sequence[JobSpec], **opts: Any
) -> tuple[WorkerContainer, dict[str, ReportEntry]]:
    """Enqueue ``specs``, run a burst container until its queues are empty, return it and
    the reports. The container's store is that of the first job unless ``store`` is given."""
    queue = await JobQueue.connect(redis_url, prefix, key=TEST_KEY)
    try:
        assert all(await queue.enqueue_many(specs))
        if specs:
            opts.setdefault("store", Path(specs[0].paths.store))
        worker = make_container(redis_url, prefix, **opts)
        await asyncio.wait_for(worker.run(), 60)
        return worker, await all_reports(queue)
    finally:
        await queue.close()


def overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two unit records ran at the same time."""
    return bool(a["start"] < b["end"] and b["start"] < a["end"])


def start_worker_process(
    redis_url: str,
    prefix: str,
    *args: str,
    env: dict[str, str] | None = None,
    store: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``python -m simrun.cli worker`` as a child process serving the test task types, with
    the jobs of ``store``."""
    flags = WorkerSettings(
        redis_url=redis_url, prefix=prefix, plugins=PLUGINS, python_path=(str(REPO),),
        poll_delay_s=0.01, **({} if store is None else {"store": store}),
    )  # fmt: skip
    return spawn(
        [*worker_argv(flags), *args],
        env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def spawn(
    argv: list[str], env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen[bytes]:
    """``argv`` as a child process in the repository root, with this environment, the tests'
    job key, and ``env``."""
    return subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, **TEST_KEY_ENV, **(env or {})}, **popen
    )
