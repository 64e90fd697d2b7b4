"""Deleting the attempts hashes of ended runs once no job of them is left in Redis."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from simrun.core.clock import SYSTEM_CLOCK, Clock, Every
from simrun.core.reports import WorkerInfo
from simrun.queues.client import JobQueue, attempts_by_run, forget_attempts
from simrun.runstore.rows import JobRow, RunRow, TaskRow
from simrun.runstore.store import RunStore
from simrun.service import decisions
from simrun.service.decisions import AttemptsVerdict
from simrun.service.liveness import listed_jobs

log = logging.getLogger(__name__)

#: How often the controller sweeps (the runs that ended are looked at).
FORGET_EVERY_S = 1.0


class EndedRuns:
    """The runs whose attempts hashes may leave Redis: those seen to end (`watch`), and at
    the first `sweep` every run a SCAN finds."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        #: Run → tasks of its hashes that a SCAN found (for runs the store does not know).
        self.runs: dict[str, set[str]] = {}
        self._scanned = False
        #: When the controller's step sweeps.
        self.sweep_every = Every(clock, FORGET_EVERY_S)

    def watch(self, run_id: str) -> None:
        """Look at ``run_id`` in the next sweeps (it ended, or was cancelled)."""
        self.runs.setdefault(run_id, set())

    async def sweep(self, store: RunStore, queue: JobQueue, workers: Sequence[WorkerInfo]) -> int:
        """Delete the hashes of the watched runs that may go now: how many were deleted."""
        if not self._scanned:
            for run_id, tasks in (await attempts_by_run(queue.redis, queue.keys)).items():
                self.runs.setdefault(run_id, set()).update(tasks)
            self._scanned = True
        states = {run_id: await store.run(run_id) for run_id in sorted(self.runs)}
        flight = await store.jobs() if states else []
        in_flight = {j.run for j in flight}
        maybe = [r for r, row in states.items() if verdict(row, r in in_flight) == "forget"]
        rows = {run_id: await store.tasks(run_id) for run_id in maybe}
        in_redis = await _runs_in_redis(queue, flight, rows, workers) if maybe else set()
        deleted = 0
        for run_id, row in states.items():
            found = verdict(row, run_id in in_flight, run_id in in_redis)
            if found == "forget":
                names = self.runs[run_id] | {t.name for t in rows.get(run_id, ())}
                deleted += await forget_attempts(queue.redis, queue.keys, run_id, names)
            if found != "wait":
                del self.runs[run_id]
        if deleted:
            log.info("deleted %d attempts hashes of runs that ended", deleted)
        return deleted


def verdict(row: RunRow | None, in_flight: bool, in_redis: bool = False) -> AttemptsVerdict:
    """`decisions.attempts_verdict` of a run as stored (None: unknown to the store)."""
    return decisions.attempts_verdict(None if row is None else row.state, in_flight, in_redis)


async def _runs_in_redis(
    queue: JobQueue,
    flight: Sequence[JobRow],
    tasks: Mapping[str, Sequence[TaskRow]],
    workers: Sequence[WorkerInfo],
) -> set[str]:
    """The runs with a job in a queue or listed by a live worker."""
    names = {"cpu", "gpu", *(j.queue for j in flight)}
    names.update(q for w in workers for q in w.queues)
    names.update(t.queue for rows in tasks.values() for t in rows if t.queue)
    found = {decisions.run_of_job(j) for j in listed_jobs(workers)}
    for name in sorted(names):
        found.update(decisions.run_of_job(j) for j in await queue.queued_job_ids(name))
    return found
