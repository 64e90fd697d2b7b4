"""Running a chunk or a merge on one worker process, watched by a `MemorySampler`.

The sampler follows the process's anonymous memory from a thread and kills the process
(SIGKILL) the moment it passes the job's limit (raised to the process's baseline plus a
headroom when below it, `simrun.worker.pool.processes.kill_limit_gb`; the report carries the limit
the process really ran under). The peak is taken per job: the sampler
starts with the job, so the peak includes what the process already holds from earlier
jobs of the same task (its setup state, a heap the allocator kept): that is what the
process really needs while it computes this task's units. A process switching task with a
large leftover heap is started afresh by the pool (see `simrun.worker.pool.processes`).

The units of a chunk go to the process in batches (one "units" request each, one reply per
unit as it ends), so a unit of a few microseconds does not pay a round trip through the
pipe. Before each batch, the units in it are checked for staleness and ``stopping()`` is
asked; a batch is sized (`next_batch_size`) to take about `BATCH_TARGET_S`, so those checks
still happen every fraction of a second: the first batch is one unit, and each next one at
most doubles, from the wall time per unit the previous batch took.

The sampler counts what the process started too: the processes of its cgroup, else of its
tree. The cgroup's kernel limit is the job's too: when the kernel's OOM killer ends the
process, or one it started (its reply says so), the unit is "killed" for memory just as
when the sampler kills it, and the report carries the same limit.

What happens to the units when the process ends under one (`death_outcome`): killed for
memory (by the sampler or the kernel) → that unit "killed"; past its time → "timeout";
killed because the worker stops → "not_run"; died on its own (a segfault, ``os._exit``) →
"failed" with the exit status. The rest of the chunk is "not_run" in every case: it is
handed back, not run in a new process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from simrun.core.jobs import JobSpec
from simrun.core.wire import UnitKey
from simrun.worker.ledger import Ledger, death_outcome
from simrun.worker.pool.processes import (
    KILL_HEADROOM_GB,
    ProcessGone,
    WorkerProcess,
    describe_exit,
    kill_limit_gb,
)
from simrun.worker.pool.protocol import ProtocolError, task_message
from simrun.worker.sampler import MemorySampler

__all__ = ["BATCH_TARGET_S", "MAX_BATCH", "RunResult", "next_batch_size", "run_chunk", "run_merge"]

StaleCheck = Callable[[UnitKey], Awaitable[bool]]
SAMPLE_INTERVAL_S = 0.02
#: About how long one batch of units may take: the units of a batch are checked for
#: staleness (and the stop for its grace period) before it starts, not one by one.
BATCH_TARGET_S = 0.1
#: The most units of one batch.
MAX_BATCH = 1024


def next_batch_size(size: int, units: int, elapsed_s: float) -> int:
    """How many units to send next, after ``units`` units took ``elapsed_s`` (wall time,
    the round trip included) in a batch of ``size``: as many as fit in `BATCH_TARGET_S` at
    that pace, at most twice ``size`` and `MAX_BATCH`, at least one."""
    if units < 1:
        return max(1, size)
    per_unit_s = elapsed_s / units
    fits = MAX_BATCH if per_unit_s <= 0 else int(BATCH_TARGET_S / per_unit_s)
    return max(1, min(fits, 2 * size, MAX_BATCH))


@dataclass(frozen=True)
class RunResult:
    """The peak memory of a job's process, whether it was killed for memory, and the limit
    it ran under (GiB; 0 without one)."""

    peak_gb: float
    killed_for_memory: bool
    limit_gb: float


def _death_message(
    worker: WorkerProcess,
    gone: ProcessGone,
    what: str,
    limit_gb: float | None,
    kill_at: float | None,
    peak_gb: float,
) -> str:
    if worker.kill_reason == "memory":
        raised = (
            f"; the job's {limit_gb:g} GiB is below what the process holds by itself, "
            f"{worker.baseline_gb:.3f} GiB, plus {KILL_HEADROOM_GB:.3f} GiB of headroom"
            if limit_gb and kill_at is not None and kill_at > limit_gb
            else ""
        )
        if worker.killed_by_kernel:
            where = "its cgroup's" if worker.box is not None else "the worker's"
            return (
                f"the kernel's OOM killer ended the worker process, or a process it started, "
                f"while {what}: {where} memory reached its limit (the job ran under "
                f"{kill_at or 0:g} GiB{raised}; peak of anonymous memory seen {peak_gb:.3f} GiB)"
            )
        return (
            f"the worker process was killed for memory while {what}: its anonymous memory "
            f"passed the limit of {kill_at or 0:g} GiB{raised} (peak seen {peak_gb:.3f} GiB)"
        )
    if worker.kill_reason == "timeout":
        return f"the worker process was killed: {what} took longer than the unit timeout"
    if worker.kill_reason == "stop":
        return f"the worker stopped while {what}; handed back"
    return f"the worker process died ({gone}) while {what}"


async def _sampler(worker: WorkerProcess, kill_at: float | None) -> MemorySampler:
    """A sampler following ``worker`` and what it started (its cgroup, else its tree) that
    kills it past ``kill_at`` GiB, started off the event loop (starting a thread waits
    until it runs, and so does stopping it), after the cgroup got the job's limit."""
    await asyncio.to_thread(worker.begin_job, kill_at)
    sampler = MemorySampler(
        worker.pid,
        interval_s=SAMPLE_INTERVAL_S,
        limit_gb=kill_at,
        on_limit=lambda _current_gb: worker.kill("memory"),
        include_children=worker.box is None,
        members=worker.members if worker.box is not None else None,
    )
    return await asyncio.to_thread(sampler.start)


async def _after_reply(worker: WorkerProcess, reply: dict[str, Any], label: str) -> None:
    """What follows a reply: the output of what it answers is over; a process that the
    kernel's OOM killer ended meanwhile kills the worker process for memory, and
    `ProcessGone` tells the caller."""
    if worker.log is not None:
        await worker.log.end_unit(label)
    if reply.get("oom_kill"):
        worker.kernel_killed_child()
        await worker.proc.wait()
        raise ProcessGone(describe_exit(worker.proc.returncode))


def _result(worker: WorkerProcess, peak_gb: float, kill_at: float | None) -> RunResult:
    return RunResult(peak_gb, worker.kill_reason == "memory", kill_at or 0.0)


async def run_chunk(
    worker: WorkerProcess,
    spec: JobSpec,
    ledger: Ledger,
    *,
    limit_gb: float | None,
    is_stale: StaleCheck,
    stopping: Callable[[], bool],
) -> RunResult:
    """Compute the units of ``spec`` on ``worker`` in order, recording each in ``ledger``.

    Before each batch of units, a unit found stale is skipped ("stale"); once ``stopping()``
    says the grace period is over, the units left are handed back ("not_run").
    """
    kill_at = kill_limit_gb(limit_gb, worker.baseline_gb)
    sampler = await _sampler(worker, kill_at)
    current: UnitKey | None = None
    what = f"setting up task {spec.task!r}"
    try:
        reply = await worker.call(task_message(spec, setup=True), spec.timeout_s)
        await _after_reply(worker, reply, f"the setup of job {spec.job_id}")
        if not reply["ok"]:
            message = f"the setup of task {spec.task!r} failed:\n{reply['error']}"
            ledger.close_rest("failed", message)
        pending, position, size = ledger.pending, 0, 1
        while position < len(pending) and not stopping():
            batch: list[UnitKey] = []
            while position < len(pending) and len(batch) < size:
                index = pending[position]
                position += 1
                if await is_stale(index):
                    ledger.record(index, "stale")
                else:
                    batch.append(index)
            if not batch:
                continue
            started = time.perf_counter()
            await worker.send({"op": "units", "indices": batch})
            for index in batch:
                current, what = index, f"computing unit {index}"
                reply = await worker.receive(spec.timeout_s)
                if reply.get("index") != index:
                    raise ProtocolError(f"a reply for unit {reply.get('index')!r}, not {index}")
                await _after_reply(worker, reply, f"unit {index} of job {spec.job_id}")
                ledger.record(
                    index,
                    "done" if reply["ok"] else "failed",
                    seconds=float(reply["seconds"]),
                    error=reply["error"],
                )
            current = None
            size = next_batch_size(size, len(batch), time.perf_counter() - started)
    except ProcessGone as gone:
        worker.note_death()
        outcome = death_outcome(worker.kill_reason)
        message = _death_message(worker, gone, what, limit_gb, kill_at, sampler.peak_gb)
        if current is None:  # during setup: every unit of the chunk shares the fate
            ledger.close_rest(outcome, message)
        else:
            ledger.record(current, outcome, error=message)
    finally:
        peak_gb = await asyncio.to_thread(sampler.stop)
    ledger.close_rest("not_run")
    return _result(worker, peak_gb, kill_at)


async def run_merge(
    worker: WorkerProcess, spec: JobSpec, ledger: Ledger, *, limit_gb: float | None
) -> RunResult:
    """Run the merge of ``spec``'s task on ``worker`` under ``limit_gb`` (the task's base
    memory), recording the outcome of the unit "merge" in ``ledger``."""
    kill_at = kill_limit_gb(limit_gb, worker.baseline_gb)
    sampler = await _sampler(worker, kill_at)
    what = f"merging task {spec.task!r}"
    try:
        reply = await worker.call(task_message(spec, setup=False))
        await _after_reply(worker, reply, f"the task request of job {spec.job_id}")
        if reply["ok"]:
            reply = await worker.call({"op": "merge"})
            await _after_reply(worker, reply, f"the merge of job {spec.job_id}")
        ledger.record(
            "merge",
            "done" if reply["ok"] else "failed",
            seconds=float(reply["seconds"]),
            error=reply["error"],
        )
    except ProcessGone as gone:
        worker.note_death()
        message = _death_message(worker, gone, what, limit_gb, kill_at, sampler.peak_gb)
        ledger.record("merge", death_outcome(worker.kill_reason), error=message)
    finally:
        peak_gb = await asyncio.to_thread(sampler.stop)
    return _result(worker, peak_gb, kill_at)
