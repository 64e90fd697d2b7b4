"""Helpers of the service's end-to-end tests: the real controller in this process (its loop
as an asyncio task), real worker containers as child processes, and readings of the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from simrun.core.states import Limits
from simrun.plugins import load_types
from simrun.runstore.rows import RunRow, UnknownRunError
from simrun.service.controller import Controller, ControllerSettings
from simrun.worker.settings import WorkerSettings, worker_argv
from simrun.workflow import check_workflow, parse_workflow
from tests.support import REPO, wait
from tests.support.harness import spawn
from tests.support.keys import TEST_KEY_TEXT
from tests.support.service_tasks import REFS

TYPES = load_types(REFS)
#: The heartbeat of the test workers: short, so that a killed worker is noticed quickly.
HEARTBEAT_S = 0.2
HEARTBEAT_TTL_S = 1.0
#: Limits under which a failing unit is tried twice, then fails its run.
RETRY_ONCE = Limits(max_retries=1, max_kills=2)


def settings(store: Path, redis_url: str, prefix: str, **more: Any) -> ControllerSettings:
    """Controller settings for tests: tiny poll delay, frequent reconciliation, the short
    heartbeats of the test workers, the tests' job key (which `spawn` gives the workers too)."""
    options: dict[str, Any] = {
        "job_key_text": TEST_KEY_TEXT,
        "poll_s": 0.02,
        "reconcile_s": 0.5,
        "window_jobs": 16,
        "heartbeat_ttl_s": HEARTBEAT_TTL_S,
        **more,
    }
    return ControllerSettings(store=store, redis_url=redis_url, prefix=prefix, **options)


async def submit(
    controller: Controller, text: str, base: Path = REPO / "examples", *, reuse: bool = True
) -> str:
    """Check and submit a workflow document the way the HTTP API will (``reuse`` False:
    every task runs, as ``--no-reuse``)."""
    doc = parse_workflow(text)
    settings = check_workflow(doc, controller.types)
    return await controller.submit(doc, settings, text, base=base, reuse=reuse)


class Service:
    """A controller whose loop runs in the background of the test's event loop."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.stop = asyncio.Event()
        self.task = asyncio.ensure_future(controller.run_forever(self.stop))

    async def submit(self, text: str, base: Path = REPO / "examples", *, reuse: bool = True) -> str:
        return await submit(self.controller, text, base, reuse=reuse)

    def check(self) -> None:
        """Fail when the loop died or a step failed for another reason than Redis."""
        if self.task.done():
            self.task.result()
        error = self.controller.last_error
        if error is not None and not error.startswith("Redis unreachable"):
            raise AssertionError(f"a controller step failed: {error}")

    async def wait(self, run_id: str, timeout_s: float = 60.0) -> RunRow:
        """The run once it ended (the controller's loop must not fail meanwhile)."""

        async def ended() -> RunRow | None:
            row = await self.controller.store.run(run_id)
            if row is None:
                raise UnknownRunError(f"there is no run {run_id!r}")
            return row if row.state != "running" else None

        run: RunRow = await wait.until(
            ended, timeout_s=timeout_s, what=f"run {run_id} to end", check=self.check
        )
        return run

    async def until(self, what: Callable[[], Any], timeout_s: float = 30.0) -> None:
        """Wait until the coroutine function ``what`` returns something true."""
        name = getattr(what, "__name__", "the condition")
        await wait.until(what, timeout_s=timeout_s, what=name, check=self.check)

    async def close(self) -> None:
        self.stop.set()
        try:
            await asyncio.wait_for(self.task, 10)
        finally:
            await self.controller.close()


@asynccontextmanager
async def service(store: Path, redis_url: str, prefix: str, **more: Any) -> AsyncIterator[Service]:
    controller = await Controller.open(settings(store, redis_url, prefix, **more), TYPES)
    running = Service(controller)
    try:
        yield running
    finally:
        await running.close()


def start_worker(
    redis_url: str,
    prefix: str,
    *,
    store: Path,
    queue: str = "cpu",
    memory_gb: float = 2.0,
    processes: int = 2,
    gpus: int = 0,
    worker_id: str | None = None,
    heartbeat_s: float = HEARTBEAT_S,
    heartbeat_ttl_s: float = HEARTBEAT_TTL_S,
    grace_s: float = 2.0,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A worker container as a child process: ``simrun worker`` (``python -m simrun.cli worker``)
    serving the test types, with short heartbeats so that a killed worker is noticed
    within a second or two, and ``grace_s`` for its running units on SIGTERM. GPUs are the
    first ``gpus`` ids of ``CUDA_VISIBLE_DEVICES``; ``store``: the service's, where its jobs'
    paths are."""
    flags = WorkerSettings(
        queues=(queue,), redis_url=redis_url, prefix=prefix, memory_gb=memory_gb,
        processes=processes, gpus=gpus, worker_id=worker_id, grace_s=grace_s, plugins=tuple(REFS),
        python_path=(str(REPO),), poll_delay_s=0.01, heartbeat_s=heartbeat_s,
        heartbeat_ttl_s=heartbeat_ttl_s, store=store,
    )  # fmt: skip
    return spawn(
        worker_argv(flags),
        env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start_controller(store: Path, redis_url: str, prefix: str) -> subprocess.Popen[bytes]:
    """The controller alone in a child process (tests.support.service_controller)."""
    argv = [
        sys.executable, "-m", "tests.support.service_controller", "--store", str(store),
        "--redis-url", redis_url, "--prefix", prefix,
    ]  # fmt: skip
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """Stop a worker container and its processes (SIGTERM, then SIGKILL)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # any worker process left behind


@contextlib.contextmanager
def workers(redis_url: str, prefix: str, count: int = 1, **opts: Any):  # type: ignore[no-untyped-def]
    procs = [start_worker(redis_url, prefix, **opts) for _ in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            stop_worker(proc)


def work_doc(name: str = "work", **settings: Any) -> str:
    """A one-task workflow of svc-work with these settings (JSON is YAML)."""
    return json.dumps(
        {"name": name, "tasks": [{"name": "work", "type": "svc-work", "settings": settings}]}
    )


def failing_work(directory: Path, fail_indices: list[int], units: int = 6) -> tuple[Path, str]:
    """A flag file in ``directory`` and a one-task workflow of ``units`` svc-work units of
    which those in ``fail_indices`` fail while the flag exists (delete it to fix them)."""
    flag = directory / "broken"
    flag.write_text("the cause of the failures")
    return flag, work_doc(units=units, fail_flag=str(flag), fail_indices=fail_indices)
