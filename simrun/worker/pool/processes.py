"""The pool of long-lived worker processes of one worker container (`ProcessPool`), and
which idle process a job gets (`choose`): one with the job's GPUs, preferably last used
for the same task; one switching task restarts when it keeps more than `RECYCLE_KEPT_GB`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simrun.core.environment import with_threads
from simrun.core.sizing import GIB
from simrun.core.wire import UnitKey
from simrun.errors import SimrunError
from simrun.worker.cgroups import (
    Cgroup,
    WorkerCgroups,
    kernel_limit_bytes,
    oom_killed,
)
from simrun.worker.pool.output import DEFAULT_UNIT_LOG_CAP, CappedLog
from simrun.worker.pool.protocol import (
    MAX_TASKS,
    InstalledType,
    ProtocolError,
    UnitSlot,
    decode_one,
    encode,
    parse_catalog,
    read_async,
)
from simrun.worker.proctree import anon_memory_bytes, kill_tree

if TYPE_CHECKING:
    from simrun.worker.pool.runner import Pace

log = logging.getLogger(__name__)

#: A process switching task restarts when it keeps more than this beyond its baseline (GiB).
RECYCLE_KEPT_GB = 4 / 1024
#: The least memory a job gets above its process's baseline before a kill (`kill_limit_gb`).
KILL_HEADROOM_GB = 32 / 1024
SPAWN_TIMEOUT_S = 120.0


class PoolError(SimrunError, RuntimeError):
    """The pool cannot start its worker processes (e.g. a ``--plugin`` fails to load)."""


class ProcessGone(SimrunError):
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


#: Seconds the log of a process that ended may take to reach its end.
_LOG_END_WAIT_S = 2.0


class WorkerProcess:
    """One worker process and the pipe to it; ``kill_reason``: "memory", "timeout" or "stop";
    ``box`` its cgroup, ``outer`` the worker's (its OOM kills count for a SIGKILLed process)."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        gpu_ids: tuple[str, ...],
        *,
        box: Cgroup | None = None,
        outer: Cgroup | None = None,
        log: CappedLog | None = None,
        slot: UnitSlot | None = None,
    ) -> None:
        self.proc = proc
        self.slot = slot
        #: The "units" request in flight: its batch number, job id and units (see `where`).
        self.batch: tuple[int, str, list[UnitKey]] | None = None
        self._batches = 0
        #: The task of the last chunk this process ran and its `Pace` there.
        self.pace: tuple[tuple[str, str], Pace] | None = None
        self.gpu_ids = gpu_ids
        self.pid = proc.pid
        self.box = box
        self.outer = outer
        self.log = log
        self._log_task: asyncio.Task[None] | None = None
        #: The unit this process runs outside a batch ("merge" during a merge).
        self.live_unit: UnitKey | None = None
        if log is not None:
            log.label_of = self.unit_label
            log.open_unit = self.open_unit
        if log is not None and proc.stderr is not None:
            self._log_task = asyncio.get_running_loop().create_task(log.copy(proc.stderr))
        self.killed_by_kernel = False
        self._oom_before: tuple[int | None, int | None] = (None, None)
        #: Anonymous memory (GiB) the process held before any task ran (its hello).
        self.baseline_gb = 0.0
        #: The tasks this process has worked on (its setup is done for them).
        self.task_keys: set[tuple[str, str]] = set()
        #: The task of its last job (None: it has run none).
        self.task: tuple[str, str] | None = None
        self.kill_reason: str | None = None

    def number_batch(self) -> int:
        """The number of a new "units" request (never reused, so its slot is not mistaken)."""
        self._batches += 1
        return self._batches

    def slot_position(self) -> tuple[int, float, float] | None:
        """Where the process is in the "units" request in flight (position, started, seconds
        of the units that ended well); None before it started the request."""
        if self.slot is None or self.batch is None:
            return None
        batch, pos, started, done_s = self.slot.read()
        if batch != self.batch[0]:
            return None
        return pos, started, done_s

    def unit_label(self, index: int) -> str:
        """The label of unit ``index`` in the log, with the job of the batch in flight."""
        job = f" of job {self.batch[1]}" if self.batch is not None else ""
        return f"unit {index}{job}"

    def open_unit(self, last_mark: int | None) -> UnitKey | None:
        """The unit whose output the process writes now, given the last unit-end marker its
        log read: the merge, or the unit after the marked one in the batch in flight; None
        when not known for sure (a batch sent ahead may run)."""
        if self.live_unit is not None:
            return self.live_unit
        if self.batch is None:
            return None
        units = self.batch[2]
        if last_mark is None or last_mark not in units:
            return units[0] if units else None
        after = units.index(last_mark) + 1
        return units[after] if after < len(units) else None

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and self.kill_reason is None

    def kill(self, reason: str) -> None:
        """SIGKILL the process and all it started (from any thread); the first reason sticks."""
        if self.kill_reason is None:
            self.kill_reason = reason
        if self.proc.returncode is not None:
            return  # reaped: its pid may be another process's by now
        if self.box is not None:
            self.box.kill_all(timeout_s=0)
        else:
            kill_tree(self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def members(self) -> list[int]:
        """The processes that count with this one: its cgroup's, else itself."""
        return self.box.procs() if self.box is not None else [self.pid]

    def _oom_counts(self) -> tuple[int | None, int | None]:
        return (
            self.box.oom_kills() if self.box is not None else None,
            self.outer.oom_kills() if self.outer is not None else None,
        )

    def begin_job(self, limit_gb: float | None) -> None:
        """Set the cgroup's kernel limit for a job, note the OOM counters (blocking)."""
        if self.box is not None:
            try:
                self.box.set_limit(kernel_limit_bytes(limit_gb))
            except OSError as exc:  # v1: EBUSY when it holds more already
                log.warning(
                    "worker process %d: cannot set its cgroup's memory limit to %s GiB, "
                    "the sampler alone bounds it: %s",
                    self.pid,
                    limit_gb,
                    exc,
                )
        self._oom_before = self._oom_counts()

    def note_death(self) -> None:
        """For a process that ended without us killing it: whether the kernel killed it for
        memory (its cgroup's OOM counter went up, or the worker's while it was SIGKILLed)."""
        if self.kill_reason is not None:
            return
        box_now, outer_now = self._oom_counts()
        box_before, outer_before = self._oom_before
        sigkilled = self.proc.returncode == -signal.SIGKILL
        if oom_killed(box_before, box_now) or (sigkilled and oom_killed(outer_before, outer_now)):
            self.kill_reason = "memory"
            self.killed_by_kernel = True

    def kernel_killed_child(self) -> None:
        """The kernel's OOM killer ended a process this one started: kill it for memory."""
        self.killed_by_kernel = True
        self.kill("memory")

    async def release(self) -> None:
        """After the process ended: remove its cgroup and let its log reach its end."""
        if self.box is not None:
            await asyncio.to_thread(self.box.remove)
        if self._log_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._log_task), _LOG_END_WAIT_S)
            except TimeoutError:
                self._log_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._log_task

    async def call(self, message: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        await self.send(message)
        return await self.receive(timeout_s)

    async def _gone(self, kill: str | None = None) -> ProcessGone:
        """The `ProcessGone` to raise once the process ended (killed first for ``kill``)."""
        if kill is not None:
            self.kill(kill)
        await self.proc.wait()
        return ProcessGone(describe_exit(self.proc.returncode))

    async def send(self, message: dict[str, Any]) -> None:
        """Send a request; `ProcessGone` when the process has ended."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(encode(message))
            await stdin.drain()
        except ConnectionError as exc:
            raise await self._gone() from exc

    async def receive(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The next reply, the process killed past ``timeout_s``; `ProcessGone` if it ends."""
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            return await asyncio.wait_for(read_async(stdout), timeout_s)
        except TimeoutError:
            raise await self._gone("timeout") from None
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise await self._gone() from exc

    async def receive_batch(self, timeout_s: float | None, sent_at: float) -> dict[str, Any]:
        """The next message of a "units" request sent at ``sent_at``; the unit the slot says
        runs is killed ("timeout") past ``timeout_s`` from its start."""
        if timeout_s is None or self.slot is None:
            return await self.receive(timeout_s)
        stdout = self.proc.stdout
        assert stdout is not None
        reading = asyncio.ensure_future(read_async(stdout))
        try:
            while True:
                found = self.slot_position()
                started = found[1] if found is not None else sent_at
                wait_s = started + timeout_s - time.monotonic()
                if wait_s > 0:
                    done, _ = await asyncio.wait({reading}, timeout=wait_s)
                    if done:
                        return reading.result()
                if self.slot_position() == found and time.monotonic() >= started + timeout_s:
                    raise await self._gone("timeout")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise await self._gone() from exc
        finally:
            if not reading.done():
                reading.cancel()

    async def hello(self) -> dict[str, Any]:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            return await asyncio.wait_for(read_async(stdout), SPAWN_TIMEOUT_S)
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            self.kill("stop")
            await self.proc.wait()
            await self.release()
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
        await self.release()
        if self.slot is not None:
            self.slot.close()


#: The shell that moves itself into a cgroup and then becomes the worker process.
_JOIN_SHELL = 'echo $$ > "$0" && exec "$@"'


def join_then_exec(box: Cgroup, argv: list[str]) -> list[str]:
    """``argv`` started inside the cgroup ``box``, all its memory charged there."""
    return ["/bin/sh", "-c", _JOIN_SHELL, str(box.path / "cgroup.procs"), *argv]


def kill_limit_gb(limit_gb: float | None, baseline_gb: float) -> float | None:
    """The anonymous memory (GiB) past which a process is killed in a job of ``limit_gb``:
    at least its baseline plus `KILL_HEADROOM_GB` (a lower limit can never be met)."""
    if limit_gb is None or not limit_gb > 0:
        return None
    return max(limit_gb, baseline_gb + KILL_HEADROOM_GB)


def needs_fresh_start(anon_gb: float, baseline_gb: float) -> bool:
    """Whether a process switching task must start afresh: it keeps more than
    `RECYCLE_KEPT_GB` beyond its baseline (it would count in the new task's peak)."""
    return anon_gb - baseline_gb > RECYCLE_KEPT_GB


@dataclass(frozen=True)
class Candidate:
    """What `choose` knows of an idle process."""

    gpu_ids: tuple[str, ...]
    task: tuple[str, str] | None
    anon_gb: float
    baseline_gb: float = 0.0
    set_up: frozenset[tuple[str, str]] = frozenset()

    @property
    def heavy(self) -> bool:
        """Whether it must start afresh to switch task (never before its first job)."""
        return self.task is not None and needs_fresh_start(self.anon_gb, self.baseline_gb)


def choose(
    idle: Sequence[Candidate], gpu_ids: tuple[str, ...], task_key: tuple[str, str]
) -> tuple[int, bool]:
    """The idle process to give a job (its index) and whether to start it afresh first:
    with ``gpu_ids``, last used for ``task_key``; else one that can switch as it is (set up
    for the task first, then keeping the least); else one started afresh."""
    if not idle:
        raise ValueError("no idle process to choose from")
    same_gpus = [i for i, c in enumerate(idle) if c.gpu_ids == gpu_ids]
    for i in same_gpus:
        if idle[i].task == task_key:
            return i, False
    if same_gpus:

        def rank(i: int) -> tuple[bool, bool, float]:
            c = idle[i]
            return c.heavy, task_key not in c.set_up, c.anon_gb - c.baseline_gb

        best = min(same_gpus, key=rank)
        return best, idle[best].heavy
    return 0, True


class ProcessPool:
    """``size`` worker processes; `checkout` one for a job, `checkin` it after. With
    ``hide_gpus`` a process without a GPU gets an empty ``CUDA_VISIBLE_DEVICES``."""

    def __init__(
        self,
        size: int,
        *,
        plugins: Sequence[str] = (),
        python_path: Sequence[str] = (),
        hide_gpus: bool = False,
        cgroups: WorkerCgroups | None = None,
        outer: Cgroup | None = None,
        unit_log_cap: int = DEFAULT_UNIT_LOG_CAP,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one process, got {size}")
        self.size = size
        self.plugins = tuple(plugins)
        self.python_path = tuple(python_path)
        self.hide_gpus = hide_gpus
        self.cgroups = cgroups
        self.outer = outer
        self.unit_log_cap = unit_log_cap
        self._idle: list[WorkerProcess] = []
        self._busy: set[WorkerProcess] = set()
        self._spawning: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()
        self._closed = False
        self.replaced = 0
        #: The task types installed on this worker, by name (known once `start` ran).
        self.installed: dict[str, InstalledType] = {}

    def _child_argv(self) -> list[str]:
        """The command line of a worker process, with the plugins and paths of this pool."""
        args = [sys.executable, "-m", "simrun.worker.pool.child"]
        for ref in self.plugins:
            args += ["--plugin", ref]
        for entry in self.python_path:
            args += ["--path", entry]
        return args

    async def catalog(self) -> dict[str, InstalledType]:
        """The task types installed here, as a worker process sees them (``child --catalog``,
        a process of its own, so that no plugin code runs in the container); `PoolError`
        when it cannot tell."""
        proc = await asyncio.create_subprocess_exec(
            *self._child_argv(), "--catalog",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=with_threads(os.environ, 1),
        )  # fmt: skip
        out, err = await proc.communicate()
        try:
            return parse_catalog(decode_one(out))
        except ProtocolError as exc:
            said = err.decode("utf-8", errors="replace").strip()[-2000:]
            raise PoolError(
                f"cannot list the task types installed here (exit code {proc.returncode}): "
                f"{exc}" + (f"\n{said}" if said else "")
            ) from None

    async def _spawn(self, gpu_ids: tuple[str, ...]) -> WorkerProcess:
        args = self._child_argv()
        if gpu_ids:
            args += ["--cuda-visible-devices", ",".join(gpu_ids)]
        elif self.hide_gpus:
            args += ["--cuda-visible-devices", ""]
        slot, slot_fd = UnitSlot.create()
        args += ["--slot-fd", str(slot_fd)]
        box = None
        if self.cgroups is not None:
            box = await asyncio.to_thread(self.cgroups.new_box)
            args += ["--cgroup", str(box.path), "--cgroup-version", str(box.version)]
            args = join_then_exec(box, args)
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(slot_fd,),
                # One core's worth of threads each, unless the user set them.
                env=with_threads(os.environ, 1),
            )
        except BaseException:
            slot.close()
            if box is not None:
                await asyncio.to_thread(box.remove)
            raise
        finally:
            os.close(slot_fd)
        worker = WorkerProcess(
            proc,
            gpu_ids,
            box=box,
            outer=self.outer,
            log=CappedLog(self.unit_log_cap),
            slot=slot,
        )
        hello = await worker.hello()
        if not hello.get("ok"):
            await worker.stop()
            raise PoolError(f"a worker process cannot start: {hello.get('error')}")
        worker.baseline_gb = float(hello.get("baseline_bytes") or 0) / GIB
        return worker

    async def start(self) -> None:
        """Start all processes and learn the installed types meanwhile; `PoolError` when
        they cannot (e.g. a plugin fails to load)."""
        catalog = asyncio.ensure_future(self.catalog())
        try:
            results = await asyncio.gather(
                *(self._spawn(()) for _ in range(self.size)), return_exceptions=True
            )
            await asyncio.wait({catalog})
        except BaseException:
            catalog.cancel()  # the catalog's process ends by itself
            raise
        started = [r for r in results if isinstance(r, WorkerProcess)]
        failures = [r for r in results if not isinstance(r, WorkerProcess)]
        error = catalog.exception()
        if error is None:
            self.installed = catalog.result()
        else:
            failures.append(error)
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

    async def checkout(self, task_key: tuple[str, str], gpu_ids: tuple[str, ...]) -> WorkerProcess:
        """An idle process bound to ``gpu_ids``, ready for ``task_key`` (see `choose`); the
        caller holds a slot of admission, so one is idle or on its way."""
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
                    await worker.release()
                    self._replace(())
            candidates = [
                Candidate(w.gpu_ids, w.task, w.anon_gb(), w.baseline_gb, frozenset(w.task_keys))
                for w in self._idle
            ]
            index, fresh = choose(candidates, gpu_ids, task_key)
            worker = self._idle.pop(index)
            self._busy.add(worker)
        if fresh:
            self._busy.discard(worker)
            self.replaced += 1
            # The old process ends while the new one starts (about 50 ms of the 0.25 s).
            ending = asyncio.ensure_future(worker.stop())
            try:
                worker = await self._spawn(gpu_ids)
            except (PoolError, OSError):
                self._replace(())
                raise
            finally:
                await asyncio.shield(ending)
            self._busy.add(worker)
        if len(worker.task_keys) >= MAX_TASKS:  # the process forgets old tasks too
            worker.task_keys.clear()
        worker.task_keys.add(task_key)
        worker.task = task_key
        return worker

    async def checkin(self, worker: WorkerProcess) -> None:
        """Give a process back; one that ended is replaced."""
        self._busy.discard(worker)
        if not worker.alive:
            if worker.proc.returncode is None:
                worker.kill(worker.kill_reason or "stop")
            await worker.proc.wait()
            await worker.release()
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
