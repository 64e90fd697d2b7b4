"""Running a chunk or a merge on one worker process, watched by a `MemorySampler`.

The sampler follows the process's anonymous memory from a thread and kills the process
(SIGKILL) the moment it passes the job's limit (raised to the process's baseline plus a
headroom when below it, `simrun.worker.pool.processes.kill_limit_gb`; the report carries the limit
the process really ran under). The peak is taken per job: the sampler
starts with the job, so the peak includes what the process already holds from earlier
jobs of the same task (its setup state, a heap the allocator kept): that is what the
process really needs while it computes this task's units. What other tasks left is not
in it, but for at most `simrun.worker.pool.processes.RECYCLE_KEPT_GB`: a process switching
task that keeps more is started afresh by the pool (see `simrun.worker.pool.processes`).

The units of a chunk go to the process in batches (one "units" request each), and their
outcomes come back batched too (a message at the end of the batch, and one after a unit
that failed): a unit of a millisecond pays neither a round trip through the pipe nor a
wake-up of the container. Which unit runs is read from the process's `UnitSlot` (shared
memory) when it matters: the unit a death or a kill ended (units of the batch before it
ended well: a failure is always sent before the next unit starts), the start a unit's
timeout counts from (`WorkerProcess.receive_batch`), the unit the output belongs to.

Before each batch is sent, the units in it are checked for staleness and ``stopping()`` is
asked; a batch is sized (`next_batch_size`) to take about `BATCH_TARGET_S`, so those checks
still happen every fraction of a second: the first batch of a process on a task is one
unit (then as large as its last batch on that task), and each next one at most doubles,
from the wall time per unit the previous batch took. Once batches are short (`AHEAD_S`),
two are in flight: the next waits in the pipe while one runs, so the process does not wait
for the container between batches (its units were checked one batch earlier).

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

StaleCheck = Callable[[UnitKey], Awaitable[bool]]
SAMPLE_INTERVAL_S = 0.02
#: About how long one batch of units may take: the units of a batch are checked for
#: staleness (and the stop for its grace period) before it starts, not one by one.
BATCH_TARGET_S = 0.1
#: The most units of one batch.
MAX_BATCH = 1024
#: A batch is sent ahead (checked for staleness one batch before it starts) only when
#: batches are short: more than one unit each, or one unit taking at most this long (the
#: view of the current attempts may be as old as `simrun.worker.jobs.STALE_REFRESH_S`
#: anyway). A longer unit is checked just before it starts.
AHEAD_S = 0.25


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


async def _after_reply(
    worker: WorkerProcess,
    reply: dict[str, Any],
    label: str,
    unit: UnitKey | None = None,
    settle: int | None = None,
) -> None:
    """What follows a reply: the output of what it answers (``unit``'s, if any) is over,
    once the marker of unit ``settle`` was read when given (then the marker ended it, and
    what the log holds now is a later unit's: a batch sent ahead runs already); a process
    that the kernel's OOM killer ended meanwhile kills the worker process for memory, and
    `ProcessGone` tells the caller."""
    if worker.log is not None:
        marked = settle is not None and await worker.log.settle(settle)
        if not marked:
            await worker.log.end_unit(label, unit)
    if reply.get("oom_kill"):
        worker.kernel_killed_child()
        await worker.proc.wait()
        raise ProcessGone(describe_exit(worker.proc.returncode))


def _unit_ended_in(
    worker: WorkerProcess, ledger: Ledger, received: int, received_s: float
) -> UnitKey | None:
    """After the process ended in a batch of which ``received`` outcomes arrived (the ones
    that ended well took ``received_s``): record the units its slot says ended well since,
    and return the unit it ended under (None: every unit of the batch had ended)."""
    assert worker.batch is not None
    units = worker.batch[2]
    found = worker.slot_position()
    if found is None:  # it never started the batch
        return units[received] if received < len(units) else None
    pos, _, done_s = found
    pos = min(pos, len(units))
    ended = units[received:pos]
    each_s = max(0.0, done_s - received_s) / len(ended) if ended else 0.0
    for unit in ended:
        ledger.record(unit, "done", seconds=each_s)
    return units[pos] if pos < len(units) else None


def _index(unit: UnitKey) -> int | None:
    return unit if isinstance(unit, int) else None


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

    Before each batch of units is sent, a unit found stale is skipped ("stale"); once
    ``stopping()`` says the grace period is over, the units not sent are handed back
    ("not_run"). Once batches are short (`AHEAD_S`) two are in flight: the next one waits
    in the pipe while one runs, so the process does not wait for the container between
    batches; the first batch of a job is as large as the last one the process ran for the
    same task.
    """
    kill_at = kill_limit_gb(limit_gb, worker.baseline_gb)
    sampler = await _sampler(worker, kill_at)
    current: UnitKey | None = None
    what = f"setting up task {spec.task!r}"
    received, received_s = 0, 0.0
    try:
        reply = await worker.call(task_message(spec, setup=True), spec.timeout_s)
        await _after_reply(worker, reply, f"the setup of job {spec.job_id}")
        if not reply["ok"]:
            message = f"the setup of task {spec.task!r} failed:\n{reply['error']}"
            ledger.close_rest("failed", message, _names(reply.get("exception")))
        pending, position = ledger.pending, 0
        task_key = (spec.run, spec.task)
        known = worker.pace is not None and worker.pace[0] == task_key
        size, batch_s = worker.pace[1:] if worker.pace is not None and known else (1, None)

        def short() -> bool:
            """Whether batches are short enough to send one ahead (see `AHEAD_S`)."""
            return size > 1 or (batch_s is not None and batch_s <= AHEAD_S)

        async def send_next() -> tuple[int, list[UnitKey]] | None:
            """Check the next ``size`` units for staleness and send those that are not."""
            nonlocal position
            while position < len(pending) and not stopping():
                batch: list[UnitKey] = []
                while position < len(pending) and len(batch) < size:
                    index = pending[position]
                    position += 1
                    if await is_stale(index):
                        ledger.record(index, "stale")
                    else:
                        batch.append(index)
                if batch:
                    number = worker.number_batch()
                    await worker.send({"op": "units", "indices": batch, "batch": number})
                    return number, batch
            return None

        head = await send_next()
        # Once batches are short (`AHEAD_S`), the next batch waits in the pipe: the process
        # starts it as this one ends. A long unit is checked for staleness just before it
        # starts, not a unit earlier.
        ahead = await send_next() if head is not None and short() else None
        begun = time.monotonic()
        while head is not None:
            number, batch = head
            worker.batch = (number, spec.job_id, batch)
            received, received_s = 0, 0.0
            current, what = batch[0], f"computing unit {batch[0]}"
            while True:
                got = await worker.receive_batch(spec.timeout_s, begun)
                for index, ok, seconds, error, *raised in got.get("units", ()):
                    if received >= len(batch) or index != batch[received]:
                        raise ProtocolError(f"an outcome for unit {index!r}, out of order")
                    received += 1
                    ledger.record(
                        index,
                        "done" if ok else "failed",
                        seconds=float(seconds),
                        error=error,
                        exceptions=_names(raised[0] if raised else None),
                    )
                    if ok:
                        received_s += float(seconds)
                if received < len(batch):
                    current, what = batch[received], f"computing unit {batch[received]}"
                killed = got.get("oom_kill")
                if killed is not None:
                    label = f"unit {killed} of job {spec.job_id}"
                    await _after_reply(worker, {"oom_kill": True}, label)
                if got.get("end"):
                    break
            if received < len(batch):
                raise ProtocolError(f"the batch ended after {received} of {len(batch)} units")
            last = batch[-1]
            await _after_reply(worker, {}, f"unit {last} of job {spec.job_id}", settle=_index(last))
            ended = time.monotonic()
            size = next_batch_size(size, len(batch), ended - begun)
            batch_s = ended - begun
            worker.pace = (task_key, size, batch_s)
            begun = ended
            worker.batch, current = None, None
            head, ahead = ahead, None
            if head is None:
                head = await send_next()
            if head is not None:  # running now, or soon: a death from here on is its unit's
                worker.batch, current = (head[0], spec.job_id, head[1]), head[1][0]
                if short():
                    ahead = await send_next()
    except ProcessGone as gone:
        worker.note_death()
        outcome = death_outcome(worker.kill_reason)
        if worker.batch is not None and current is not None:
            current = _unit_ended_in(worker, ledger, received, received_s)
            what = f"computing unit {current}" if current is not None else what
        message = _death_message(worker, gone, what, limit_gb, kill_at, sampler.peak_gb)
        if worker.log is not None and worker.log.sink is not None:
            worker.log.sink.orphan_unit = current  # what it printed last is its unit's
        if current is None and worker.batch is None:  # during setup: the whole chunk
            ledger.close_rest(outcome, message)
        elif current is not None:
            ledger.record(current, outcome, error=message)
    finally:
        worker.batch = None
        peak_gb = await asyncio.to_thread(sampler.stop)
    ledger.close_rest("not_run")
    return _result(worker, peak_gb, kill_at)


def _names(raised: object) -> tuple[str, ...]:
    """The exception type names of a reply (a list of strings; anything else: none)."""
    if not isinstance(raised, list | tuple):
        return ()
    return tuple(str(name) for name in raised)


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
            worker.live_unit = "merge"  # what it prints from now on is the merge's
            reply = await worker.call({"op": "merge"})
            await _after_reply(worker, reply, f"the merge of job {spec.job_id}", "merge")
        ledger.record(
            "merge",
            "done" if reply["ok"] else "failed",
            seconds=float(reply["seconds"]),
            error=reply["error"],
            exceptions=_names(reply.get("exception")),
        )
    except ProcessGone as gone:
        worker.note_death()
        message = _death_message(worker, gone, what, limit_gb, kill_at, sampler.peak_gb)
        if worker.log is not None and worker.log.sink is not None:
            worker.log.sink.orphan_unit = "merge"
        ledger.record("merge", death_outcome(worker.kill_reason), error=message)
    finally:
        worker.live_unit = None
        peak_gb = await asyncio.to_thread(sampler.stop)
    return _result(worker, peak_gb, kill_at)
