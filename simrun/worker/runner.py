"""Running a chunk or a merge on one worker process, watched by a `MemorySampler`.

The sampler follows the process's anonymous memory from a thread and kills the process
(SIGKILL) the moment it passes the job's limit. The peak is taken per job: the sampler
starts with the job, so the peak includes what the process already holds from earlier
jobs of the same task (its setup state, a heap the allocator kept): that is what the
process really needs while it computes this task's units. A process switching task with a
large leftover heap is started afresh by the pool (see `simrun.worker.pool`).

What happens to the units when the process ends under one (`death_outcome`): killed for
memory → that unit "killed"; past its time → "timeout"; killed because the worker stops →
"not_run"; died on its own (a segfault, ``os._exit``) → "failed" with the exit status. The
rest of the chunk is "not_run" in every case: it is handed back, not run in a new process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from simrun.queues import JobSpec, UnitKey
from simrun.worker.ledger import Ledger, death_outcome
from simrun.worker.pool import ProcessGone, WorkerProcess
from simrun.worker.sampler import MemorySampler

__all__ = ["RunResult", "run_chunk", "run_merge"]

StaleCheck = Callable[[UnitKey], Awaitable[bool]]
SAMPLE_INTERVAL_S = 0.02


@dataclass(frozen=True)
class RunResult:
    peak_gb: float
    killed_for_memory: bool


def _task_message(spec: JobSpec, setup: bool) -> dict[str, object]:
    return {
        "op": "task",
        "run": spec.run,
        "task": spec.task,
        "task_type": spec.task_type,
        "settings": spec.settings,
        "paths": spec.paths.to_dict(),
        "setup": setup,
    }


def _death_message(
    worker: WorkerProcess, gone: ProcessGone, what: str, limit_gb: float | None, peak_gb: float
) -> str:
    if worker.kill_reason == "memory":
        return (
            f"the worker process was killed for memory while {what}: its anonymous memory "
            f"passed the limit of {limit_gb:g} GiB (peak seen {peak_gb:.3f} GiB)"
        )
    if worker.kill_reason == "timeout":
        return f"the worker process was killed: {what} took longer than the unit timeout"
    if worker.kill_reason == "stop":
        return f"the worker stopped while {what}; handed back"
    return f"the worker process died ({gone}) while {what}"


async def _sampler(worker: WorkerProcess, limit_gb: float | None) -> MemorySampler:
    """A sampler following ``worker``, started off the event loop (starting a thread waits
    until it runs, and so does stopping it)."""
    sampler = MemorySampler(
        worker.pid,
        interval_s=SAMPLE_INTERVAL_S,
        limit_gb=limit_gb if limit_gb else None,
        on_limit=lambda _current_gb: worker.kill("memory"),
    )
    return await asyncio.to_thread(sampler.start)


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

    Before each unit, a unit found stale is skipped ("stale"); once ``stopping()`` says the
    grace period is over, the units left are handed back ("not_run").
    """
    sampler = await _sampler(worker, limit_gb)
    current: UnitKey | None = None
    what = f"setting up task {spec.task!r}"
    try:
        reply = await worker.call(_task_message(spec, setup=True), spec.timeout_s)
        if not reply["ok"]:
            message = f"the setup of task {spec.task!r} failed:\n{reply['error']}"
            ledger.close_rest("failed", message)
        for index in ledger.pending:
            if stopping():
                break
            if await is_stale(index):
                ledger.record(index, "stale")
                continue
            current, what = index, f"computing unit {index}"
            reply = await worker.call({"op": "unit", "index": index}, spec.timeout_s)
            ledger.record(
                index,
                "done" if reply["ok"] else "failed",
                seconds=float(reply["seconds"]),
                error=reply["error"],
            )
            current = None
    except ProcessGone as gone:
        outcome = death_outcome(worker.kill_reason)
        message = _death_message(worker, gone, what, limit_gb, sampler.peak_gb)
        if current is None:  # during setup: every unit of the chunk shares the fate
            ledger.close_rest(outcome, message)
        else:
            ledger.record(current, outcome, error=message)
    finally:
        peak_gb = await asyncio.to_thread(sampler.stop)
    ledger.close_rest("not_run")
    return RunResult(peak_gb, worker.kill_reason == "memory")


async def run_merge(
    worker: WorkerProcess, spec: JobSpec, ledger: Ledger, *, limit_gb: float | None
) -> RunResult:
    """Run the merge of ``spec``'s task on ``worker`` under ``limit_gb`` (the task's base
    memory), recording the outcome of the unit "merge" in ``ledger``."""
    sampler = await _sampler(worker, limit_gb)
    what = f"merging task {spec.task!r}"
    try:
        reply = await worker.call(_task_message(spec, setup=False))
        if reply["ok"]:
            reply = await worker.call({"op": "merge"})
        ledger.record(
            "merge",
            "done" if reply["ok"] else "failed",
            seconds=float(reply["seconds"]),
            error=reply["error"],
        )
    except ProcessGone as gone:
        message = _death_message(worker, gone, what, limit_gb, sampler.peak_gb)
        ledger.record("merge", death_outcome(worker.kill_reason), error=message)
    finally:
        peak_gb = await asyncio.to_thread(sampler.stop)
    return RunResult(peak_gb, worker.kill_reason == "memory")
