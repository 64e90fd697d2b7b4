"""The pool of worker processes of one worker container.

Each worker process is a long-lived child (``python -m simrun.worker.pool.child``, started with
exec, never forked from this threaded event-loop process) that runs plugin code on
request. The pool keeps ``size`` of them; a job checks one out for its whole run and checks
it back in; a process that died or was killed is replaced in the background.

Which process a job gets (`choose`): one bound to the GPUs the job was granted (a GPU id
can only be given to a process through ``CUDA_VISIBLE_DEVICES`` when it starts), preferably
one already working on the job's task (its ``setup`` is done). A process switching to
another task is started afresh when the anonymous memory it keeps from its earlier tasks
passes `RECYCLE_FRACTION` of the new job's limit (`needs_fresh_start`): a long-lived
process keeps the heap of earlier chunks (allocators rarely give memory back), and that
would count against, and could even kill, the next task's units.

What it keeps is counted beyond its *baseline*: the anonymous memory the process measured
itself right after it started and imported simrun, before any plugin code ran (about 19 MiB
for CPython with simrun's imports). A fresh process holds that much too, so restarting
cannot win it back; counting it made every light task (a learned request of a few tens of
MiB) restart every process at every new task.

The memory limit a process is killed at (`kill_limit_gb`) is the job's limit, but never
less than its baseline plus `KILL_HEADROOM_GB`: a limit below what the bare interpreter
holds can never be met, and killing the process for it would only loop through kills. Such
a limit comes from a hint or an override (learned requests have a floor, see
`simrun.resources.policy.MIN_MEMORY_PER_WORKER_GB`); the job runs under the raised limit
and reports it as the limit it ran under, so a kill there retries above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simrun.worker.pool.protocol import encode, read_async
from simrun.worker.sampler import GIB, anon_memory_bytes

__all__ = [
    "KILL_HEADROOM_GB",
    "RECYCLE_FRACTION",
    "PoolError",
    "ProcessGone",
    "ProcessPool",
    "WorkerProcess",
    "choose",
    "describe_exit",
    "kill_limit_gb",
    "needs_fresh_start",
]

log = logging.getLogger(__name__)

#: A process switching task restarts when what it keeps beyond its baseline passes this
#: fraction of the new job's limit.
RECYCLE_FRACTION = 0.5
#: The least memory a job's plugin code gets above the process's baseline before the
#: process is killed for memory (see `kill_limit_gb`): room to import a module such as
#: numpy (about 6 MiB) and do a little work.
KILL_HEADROOM_GB = 32 / 1024
SPAWN_TIMEOUT_S = 120.0
#: As many tasks as a worker process remembers (simrun.worker.pool.child.MAX_TASKS).
MAX_TASK_KEYS = 16


class PoolError(RuntimeError):
    """The pool cannot start its worker processes (e.g. a ``--plugin`` fails to load)."""


class ProcessGone(Exception):
    """The worker process ended while a request was in flight."""


def describe_exit(returncode: int | None) -> str:
    """``exit code 3`` or ``killed by signal SIGSEGV`` for a process's return code."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}"
    return f"exit code {returncode}"


class WorkerProcess:
    """One worker process and the pipe to it. ``kill_reason`` says who killed it, if we did:
    "memory", "timeout" or "stop"."""

    def __init__(self, proc: asyncio.subprocess.Process, gpu_ids: tuple[str, ...]) -> None:
        self.proc = proc
        self.gpu_ids = gpu_ids
        self.pid = proc.pid
        #: Anonymous memory (GiB) the process held before any plugin code ran (its hello).
        self.baseline_gb = 0.0
        #: The tasks this process has worked on (its setup is done for them).
        self.task_keys: set[tuple[str, str]] = set()
        self.kill_reason: str | None = None

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and self.kill_reason is None

    def kill(self, reason: str) -> None:
        """SIGKILL the process (safe from any thread); the first reason given sticks."""
        if self.kill_reason is None:
            self.kill_reason = reason
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    async def call(self, message: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send a request and wait for its (first) reply; see `send` and `receive`."""
        await self.send(message)
        return await self.receive(timeout_s)

    async def send(self, message: dict[str, Any]) -> None:
        """Send a request; `ProcessGone` when the process has ended."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(encode(message))
            await stdin.drain()
        except ConnectionError as exc:
            await self.proc.wait()
            raise ProcessGone(describe_exit(self.proc.returncode)) from exc

    async def receive(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The next reply. Past ``timeout_s`` the process is killed (reason "timeout");
        `ProcessGone` when it ends before replying, for whatever reason."""
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            if timeout_s is None:
                return await read_async(stdout)
            return await asyncio.wait_for(read_async(stdout), timeout_s)
        except TimeoutError:
            self.kill("timeout")
            await self.proc.wait()
            raise ProcessGone(describe_exit(self.proc.returncode)) from None
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            await self.proc.wait()
            raise ProcessGone(describe_exit(self.proc.returncode)) from exc

    async def hello(self) -> dict[str, Any]:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            return await asyncio.wait_for(read_async(stdout), SPAWN_TIMEOUT_S)
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            self.kill("stop")
            await self.proc.wait()
            raise PoolError(
                f"worker process {self.pid} did not start ({describe_exit(self.proc.returncode)})"
            ) from exc

    def anon_gb(self) -> float:
        return (anon_memory_bytes(self.pid) or 0) / GIB

    async def stop(self) -> None:
        """End the process: close its stdin (it exits), and kill it if it does not."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 2.0)
        except TimeoutError:
            self.kill("stop")
            await self.proc.wait()


def kill_limit_gb(limit_gb: float | None, baseline_gb: float) -> float | None:
    """The anonymous memory (GiB) past which a process of baseline ``baseline_gb`` is killed
    while it runs a job of limit ``limit_gb``: the limit, raised to at least the baseline
    plus `KILL_HEADROOM_GB`. None (no limit) when ``limit_gb`` is None or not above 0."""
    if limit_gb is None or not limit_gb > 0:
        return None
    return max(limit_gb, baseline_gb + KILL_HEADROOM_GB)


def needs_fresh_start(anon_gb: float, baseline_gb: float, limit_gb: float | None) -> bool:
    """Whether a process switching task must be started afresh: the anonymous memory it
    holds beyond its baseline passes `RECYCLE_FRACTION` of the limit it would be killed at
    for the new job (`kill_limit_gb`). Never without a limit."""
    kill_at = kill_limit_gb(limit_gb, baseline_gb)
    return kill_at is not None and anon_gb - baseline_gb > RECYCLE_FRACTION * kill_at


@dataclass(frozen=True)
class Candidate:
    """What `choose` knows of an idle process: its GPUs, its tasks, its anonymous memory
    now and its baseline (what it held before any plugin code ran), in GiB."""

    gpu_ids: tuple[str, ...]
    task_keys: frozenset[tuple[str, str]]
    anon_gb: float
    baseline_gb: float = 0.0

    @property
    def kept_gb(self) -> float:
        """What the process keeps beyond its baseline."""
        return self.anon_gb - self.baseline_gb


def choose(
    idle: Sequence[Candidate],
    gpu_ids: tuple[str, ...],
    task_key: tuple[str, str],
    limit_gb: float | None,
) -> tuple[int, bool]:
    """The idle process to give a job (its index) and whether to start it afresh first.

    Prefers a process bound to ``gpu_ids`` working on ``task_key``, then one bound to
    ``gpu_ids`` keeping the least memory beyond its baseline (started afresh when it keeps
    too much, see `needs_fresh_start`), then any (started afresh with the right GPUs).
    """
    if not idle:
        raise ValueError("no idle process to choose from")
    same_gpus = [i for i, c in enumerate(idle) if c.gpu_ids == gpu_ids]
    for i in same_gpus:
        if task_key in idle[i].task_keys:
            return i, False
    if same_gpus:
        best = min(same_gpus, key=lambda i: idle[i].kept_gb)
        chosen = idle[best]
        heavy = needs_fresh_start(chosen.anon_gb, chosen.baseline_gb, limit_gb)
        return best, heavy and bool(chosen.task_keys)
    return 0, True


class ProcessPool:
    """``size`` worker processes; `checkout` one for a job, `checkin` it after.

    ``hide_gpus`` gives processes without a GPU an empty ``CUDA_VISIBLE_DEVICES`` (in a
    container that has GPUs, a CPU job must not use one granted to another job).
    """

    def __init__(
        self,
        size: int,
        *,
        plugins: Sequence[str] = (),
        python_path: Sequence[str] = (),
        hide_gpus: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one process, got {size}")
        self.size = size
        self.plugins = tuple(plugins)
        self.python_path = tuple(python_path)
        self.hide_gpus = hide_gpus
        self._idle: list[WorkerProcess] = []
        self._busy: set[WorkerProcess] = set()
        self._spawning: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()
        self._closed = False
        self.replaced = 0

    async def _spawn(self, gpu_ids: tuple[str, ...]) -> WorkerProcess:
        args = [sys.executable, "-m", "simrun.worker.pool.child"]
        for ref in self.plugins:
            args += ["--plugin", ref]
        for entry in self.python_path:
            args += ["--path", entry]
        if gpu_ids:
            args += ["--cuda-visible-devices", ",".join(gpu_ids)]
        elif self.hide_gpus:
            args += ["--cuda-visible-devices", ""]
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        worker = WorkerProcess(proc, gpu_ids)
        hello = await worker.hello()
        if not hello.get("ok"):
            await worker.stop()
            raise PoolError(f"a worker process cannot start: {hello.get('error')}")
        worker.baseline_gb = float(hello.get("baseline_bytes") or 0) / GIB
        return worker

    async def start(self) -> None:
        """Start all processes; `PoolError` when they cannot (e.g. a plugin fails to load)."""
        results = await asyncio.gather(
            *(self._spawn(()) for _ in range(self.size)), return_exceptions=True
        )
        started = [r for r in results if isinstance(r, WorkerProcess)]
        failures = [r for r in results if not isinstance(r, WorkerProcess)]
        if failures:
            await asyncio.gather(*(w.stop() for w in started))
            raise PoolError(str(failures[0])) from failures[0]
        self._idle.extend(started)

    def _replace(self, gpu_ids: tuple[str, ...] = ()) -> None:
        """Start a process in the background to take the place of one that ended."""
        self.replaced += 1
        task = asyncio.get_running_loop().create_task(self._replacement(gpu_ids))
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def _replacement(self, gpu_ids: tuple[str, ...]) -> None:
        delay_s = 0.5
        while not self._closed:
            try:
                worker = await self._spawn(gpu_ids)
            except (PoolError, OSError) as exc:
                log.error("cannot start a worker process, retrying in %.1f s: %s", delay_s, exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 30.0)
                continue
            async with self._changed:
                if self.closed:
                    await worker.stop()
                    return
                self._idle.append(worker)
                self._changed.notify_all()
            return

    async def checkout(
        self, task_key: tuple[str, str], gpu_ids: tuple[str, ...], limit_gb: float | None
    ) -> WorkerProcess:
        """An idle process bound to ``gpu_ids``, ready for ``task_key`` (see `choose`).

        The caller must hold a slot of admission, so a process is idle or on its way.
        """
        async with self._changed:
            while True:
                await self._changed.wait_for(lambda: bool(self._idle) or self._closed)
                if self._closed:
                    raise PoolError("the pool is closed")
                dead = [w for w in self._idle if w.proc.returncode is not None]
                if not dead:
                    break
                for worker in dead:  # died while idle (the kernel's OOM killer, say)
                    log.warning(
                        "worker process %d died while idle: %s",
                        worker.pid,
                        describe_exit(worker.proc.returncode),
                    )
                    self._idle.remove(worker)
                    self._replace(())
            candidates = [
                Candidate(w.gpu_ids, frozenset(w.task_keys), w.anon_gb(), w.baseline_gb)
                for w in self._idle
            ]
            index, fresh = choose(candidates, gpu_ids, task_key, limit_gb)
            worker = self._idle.pop(index)
            self._busy.add(worker)
        if fresh:
            self._busy.discard(worker)
            await worker.stop()
            self.replaced += 1
            try:
                worker = await self._spawn(gpu_ids)
            except (PoolError, OSError):
                self._replace(())
                raise
            self._busy.add(worker)
        if len(worker.task_keys) >= MAX_TASK_KEYS:  # the process forgets old tasks too
            worker.task_keys.clear()
        worker.task_keys.add(task_key)
        return worker

    async def checkin(self, worker: WorkerProcess) -> None:
        """Give a process back; one that ended is replaced."""
        self._busy.discard(worker)
        if not worker.alive:
            if worker.proc.returncode is None:
                worker.kill(worker.kill_reason or "stop")
            await worker.proc.wait()
            if not self._closed:
                self._replace(())
            return
        async with self._changed:
            self._idle.append(worker)
            self._changed.notify_all()

    def kill_busy(self, reason: str) -> int:
        """Kill every process that is running a job (at the end of a stop's grace period)."""
        busy = list(self._busy)
        for worker in busy:
            worker.kill(reason)
        return len(busy)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in (*self._idle, *self._busy)]

    async def close(self) -> None:
        """Stop every process and every replacement being started."""
        self._closed = True
        for task in list(self._spawning):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._spawning, return_exceptions=True)
        async with self._changed:
            self._changed.notify_all()
        workers = [*self._idle, *self._busy]
        self._idle.clear()
        self._busy.clear()
        await asyncio.gather(*(w.stop() for w in workers))
