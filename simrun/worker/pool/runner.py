"""Running a chunk or a merge on one worker process, watched by a `MemorySampler`: pure
decisions (`Pace`, `next_batch_size`, `ended_before_death`) under the loop `_Chunk`."""

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
#: About how long one batch of units may take (staleness and the stop are checked per batch).
BATCH_TARGET_S = 0.1
#: The most units of one batch.
MAX_BATCH = 1024
#: A batch is sent ahead (checked one batch early) only when batches hold more than one
#: unit or take at most this long; a longer unit is checked just before it starts.
AHEAD_S = 0.25


def next_batch_size(size: int, units: int, elapsed_s: float) -> int:
    """The size of the next batch after ``units`` of a batch of ``size`` took ``elapsed_s``:
    what fits in `BATCH_TARGET_S` at that pace, at most twice ``size`` and `MAX_BATCH`."""
    if units < 1:
        return max(1, size)
    per_unit_s = elapsed_s / units
    fits = MAX_BATCH if per_unit_s <= 0 else int(BATCH_TARGET_S / per_unit_s)
    return max(1, min(fits, 2 * size, MAX_BATCH))


@dataclass(frozen=True)
class Pace:
    """The size of a process's next batch of a task, and the seconds its last one took."""

    size: int = 1
    batch_s: float | None = None

    @property
    def sends_ahead(self) -> bool:
        """Whether batches are short enough to send the next one ahead (`AHEAD_S`)."""
        return self.size > 1 or (self.batch_s is not None and self.batch_s <= AHEAD_S)

    def after(self, units: int, elapsed_s: float) -> Pace:
        """The pace once ``units`` units took ``elapsed_s`` in a batch of this size."""
        return Pace(next_batch_size(self.size, units, elapsed_s), elapsed_s)


def ended_before_death(
    units: list[UnitKey],
    received: int,
    received_s: float,
    slot: tuple[int, float, float] | None,
) -> tuple[list[UnitKey], float, UnitKey | None]:
    """For a process that died in a batch of which ``received`` outcomes arrived (that ended
    well in ``received_s``), given its `slot_position` (None: it never started the batch):
    the units that ended well since, the seconds of each, and the unit it died in."""
    if slot is None:
        return [], 0.0, units[received] if received < len(units) else None
    pos, _, done_s = slot
    pos = min(pos, len(units))
    ended = units[received:pos]
    each_s = max(0.0, done_s - received_s) / len(ended) if ended else 0.0
    return ended, each_s, units[pos] if pos < len(units) else None


@dataclass(frozen=True)
class JobMemory:
    """A job's process: its peak memory, killed for memory, and its limit (GiB; 0: none)."""

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
    """A sampler of ``worker`` and what it started that kills it past ``kill_at`` GiB."""
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
    """What follows a reply: the output of ``unit`` is over (unless the marker of ``settle`` was
    read: then a later unit prints); a kernel OOM kill meanwhile kills the process."""
    if worker.log is not None:
        marked = settle is not None and await worker.log.settle(settle)
        if not marked:
            await worker.log.end_unit(label, unit)
    if reply.get("oom_kill"):
        worker.kernel_killed_child()
        await worker.proc.wait()
        raise ProcessGone(describe_exit(worker.proc.returncode))


def _names(raised: object) -> tuple[str, ...]:
    """The exception type names of a reply (a list of strings; anything else: none)."""
    if not isinstance(raised, list | tuple):
        return ()
    return tuple(str(name) for name in raised)


class _Chunk:
    """The loop of one chunk job on a worker process: its setup, then its batches."""

    def __init__(
        self,
        worker: WorkerProcess,
        spec: JobSpec,
        ledger: Ledger,
        is_stale: StaleCheck,
        stopping: Callable[[], bool],
    ) -> None:
        self.worker, self.spec, self.ledger = worker, spec, ledger
        self.is_stale, self.stopping = is_stale, stopping
        self.pending: list[UnitKey] = []
        self.position = 0
        self.task_key = (spec.run, spec.task)
        known = worker.pace is not None and worker.pace[0] == self.task_key
        self.pace = worker.pace[1] if worker.pace is not None and known else Pace()
        self.current: UnitKey | None = None
        self.what = f"setting up task {spec.task!r}"
        self.received, self.received_s = 0, 0.0

    def _at(self, unit: UnitKey) -> None:
        self.current, self.what = unit, f"computing unit {unit}"

    async def setup(self) -> None:
        spec = self.spec
        reply = await self.worker.call(task_message(spec, setup=True), spec.timeout_s)
        await _after_reply(self.worker, reply, f"the setup of job {spec.job_id}")
        if not reply["ok"]:
            message = f"the setup of task {spec.task!r} failed:\n{reply['error']}"
            self.ledger.close_rest("failed", message, _names(reply.get("exception")))

    async def _send_next(self) -> tuple[int, list[UnitKey]] | None:
        """Send the next ``pace.size`` units not stale; None once none is left or it stops."""
        while self.position < len(self.pending) and not self.stopping():
            batch: list[UnitKey] = []
            while self.position < len(self.pending) and len(batch) < self.pace.size:
                index = self.pending[self.position]
                self.position += 1
                if await self.is_stale(index):
                    self.ledger.record(index, "stale")
                else:
                    batch.append(index)
            if batch:
                number = self.worker.number_batch()
                await self.worker.send({"op": "units", "indices": batch, "batch": number})
                return number, batch
        return None

    async def run(self) -> None:
        """Send the units pending after the setup in batches and record their outcomes."""
        self.pending = self.ledger.pending
        head = await self._send_next()
        ahead = await self._send_next() if head is not None and self.pace.sends_ahead else None
        begun = time.monotonic()
        while head is not None:
            number, batch = head
            self.worker.batch = (number, self.spec.job_id, batch)
            await self._receive(batch, begun)
            ended = time.monotonic()
            self.pace = self.pace.after(len(batch), ended - begun)
            self.worker.pace = (self.task_key, self.pace)
            begun = ended
            self.worker.batch, self.current = None, None
            head = ahead if ahead is not None else await self._send_next()
            ahead = None
            if head is not None:  # running now, or soon: a death from here on is its unit's
                self.worker.batch = (head[0], self.spec.job_id, head[1])
                self.current = head[1][0]
                if self.pace.sends_ahead:
                    ahead = await self._send_next()

    async def _receive(self, batch: list[UnitKey], begun: float) -> None:
        """Record the outcomes of ``batch`` up to its end message and its last marker."""
        self.received, self.received_s = 0, 0.0
        self._at(batch[0])
        label = f"of job {self.spec.job_id}"
        while True:
            got = await self.worker.receive_batch(self.spec.timeout_s, begun)
            for row in got.get("units", ()):
                self._record(batch, row)
            if self.received < len(batch):
                self._at(batch[self.received])
            killed = got.get("oom_kill")
            if killed is not None:
                await _after_reply(self.worker, {"oom_kill": True}, f"unit {killed} {label}")
            if got.get("end"):
                break
        if self.received < len(batch):
            raise ProtocolError(f"the batch ended after {self.received} of {len(batch)} units")
        last = batch[-1]  # a unit of a chunk: an index
        await _after_reply(self.worker, {}, f"unit {last} {label}", settle=int(last))

    def _record(self, batch: list[UnitKey], row: list[Any]) -> None:
        """Record one outcome of ``batch``: [index, ok, seconds, error, exception names]."""
        index, ok, seconds, error, *raised = row
        if self.received >= len(batch) or index != batch[self.received]:
            raise ProtocolError(f"an outcome for unit {index!r}, out of order")
        self.received += 1
        self.ledger.record(
            index,
            "done" if ok else "failed",
            seconds=float(seconds),
            error=error,
            exceptions=_names(raised[0] if raised else None),
        )
        if ok:
            self.received_s += float(seconds)

    def settle_death(self) -> None:
        """Record what the dead process's slot says ended well; find the unit it died in."""
        batch = self.worker.batch
        if batch is None or self.current is None:
            return
        slot = self.worker.slot_position()
        ended, each_s, self.current = ended_before_death(
            batch[2], self.received, self.received_s, slot
        )
        for unit in ended:
            self.ledger.record(unit, "done", seconds=each_s)
        if self.current is not None:
            self._at(self.current)

    def record_death(self, message: str) -> None:
        """Give the unit the process died in (the whole chunk, outside a batch) its outcome."""
        outcome = death_outcome(self.worker.kill_reason)
        _orphan_output(self.worker, self.current)
        if self.current is None and self.worker.batch is None:
            self.ledger.close_rest(outcome, message)
        elif self.current is not None:
            self.ledger.record(self.current, outcome, error=message)


def _orphan_output(worker: WorkerProcess, unit: UnitKey | None) -> None:
    """What the process printed last is ``unit``'s."""
    if worker.log is not None and worker.log.sink is not None:
        worker.log.sink.orphan_unit = unit


async def run_chunk(
    worker: WorkerProcess,
    spec: JobSpec,
    ledger: Ledger,
    *,
    limit_gb: float | None,
    is_stale: StaleCheck,
    stopping: Callable[[], bool],
) -> JobMemory:
    """Compute the units of ``spec`` on ``worker``, recording each in ``ledger`` ("stale"
    before its batch is sent; "not_run" once ``stopping()``)."""
    kill_at = kill_limit_gb(limit_gb, worker.baseline_gb)
    sampler = await _sampler(worker, kill_at)
    chunk = _Chunk(worker, spec, ledger, is_stale, stopping)
    try:
        await chunk.setup()
        await chunk.run()
    except ProcessGone as gone:
        worker.note_death()
        chunk.settle_death()
        chunk.record_death(
            _death_message(worker, gone, chunk.what, limit_gb, kill_at, sampler.peak_gb)
        )
    finally:
        worker.batch = None
        peak_gb = await asyncio.to_thread(sampler.stop)
    ledger.close_rest("not_run")
    return JobMemory(peak_gb, worker.kill_reason == "memory", kill_at or 0.0)


async def run_merge(
    worker: WorkerProcess, spec: JobSpec, ledger: Ledger, *, limit_gb: float | None
) -> JobMemory:
    """Run the merge of ``spec``'s task on ``worker``, recording the unit "merge"."""
    kill_at = kill_limit_gb(limit_gb, worker.baseline_gb)
    sampler = await _sampler(worker, kill_at)
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
        what = f"merging task {spec.task!r}"
        message = _death_message(worker, gone, what, limit_gb, kill_at, sampler.peak_gb)
        _orphan_output(worker, "merge")
        ledger.record("merge", death_outcome(worker.kill_reason), error=message)
    finally:
        worker.live_unit = None
        peak_gb = await asyncio.to_thread(sampler.stop)
    return JobMemory(peak_gb, worker.kill_reason == "memory", kill_at or 0.0)
