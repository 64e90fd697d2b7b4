"""Deleting the attempts hashes of runs that ended, once no job of them is left in Redis.

A worker reads a unit's current attempt (`simrun.queues.current_attempts`) to skip jobs
that were dispatched again since, and takes a unit without one for current. So a run's
hashes (one per task) must stay while a job of it may still be taken or run, and may go
after: the rule is `simrun.service.decisions.attempts_verdict`. `EndedRuns` gathers the
facts for it and deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from simrun.core.clock import SYSTEM_CLOCK, Clock
from simrun.core.reports import WorkerInfo
from simrun.queues.client import JobQueue, attempts_by_run, forget_attempts
from simrun.runstore.store import RunStore
from simrun.service import decisions
from simrun.service.liveness import listed_jobs

log = logging.getLogger(__name__)

#: How often the controller sweeps (the runs that ended are looked at).
FORGET_EVERY_S = 1.0


class EndedRuns:
    """The runs whose attempts hashes may leave Redis once no job of them is left.

    The controller adds the runs it saw end and those it cancelled (`watch`); the first
    `sweep` adds the runs of every hash a SCAN of the namespace finds (left behind by an
    earlier service, or by a service stopped before it could delete them). A run that
    runs again (a replay) is dropped, and added when it ends again.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        #: Run → tasks of its hashes that a SCAN found (for runs the store does not know).
        self.runs: dict[str, set[str]] = {}
        self._scanned = False
        self.clock = clock
        self._last_sweep = -float("inf")

    def due(self) -> bool:
        """Whether `FORGET_EVERY_S` passed since the last sweep the controller's step made
        (True at start); when so, the time is taken as that of this one."""
        now = self.clock.monotonic()
        if now - self._last_sweep < FORGET_EVERY_S:
            return False
        self._last_sweep = now
        return True

    def watch(self, run_id: str) -> None:
        """Look at ``run_id`` in the next sweeps (it ended, or was cancelled)."""
        self.runs.setdefault(run_id, set())

    async def sweep(self, store: RunStore, queue: JobQueue, workers: Sequence[WorkerInfo]) -> int:
        """Delete the hashes of the watched runs that may go now (``workers`` are the live
        ones); returns how many hashes were deleted. Runs with jobs left stay watched."""
        if not self._scanned:
            for run_id, tasks in (await attempts_by_run(queue.redis, queue.keys)).items():
                self.runs.setdefault(run_id, set()).update(tasks)
            self._scanned = True
        if not self.runs:
            return 0
        states: dict[str, str | None] = {}
        for run_id in sorted(self.runs):
            row = await store.run(run_id)
            states[run_id] = None if row is None else row.state
        flight = await store.jobs()
        in_flight = {j.run for j in flight}
        maybe = [
            run_id
            for run_id, state in states.items()
            if decisions.attempts_verdict(state, run_id in in_flight, False) == "forget"
        ]
        task_rows = {run_id: await store.tasks(run_id) for run_id in maybe}
        in_redis: set[str] = set()
        if maybe:  # only then are the queues worth reading
            names = {"cpu", "gpu", *(j.queue for j in flight)}
            names.update(q for w in workers for q in w.queues)
            names.update(t.queue for rows in task_rows.values() for t in rows if t.queue)
            in_redis.update(decisions.run_of_job(j) for j in listed_jobs(workers))
            for name in sorted(names):
                queued = await queue.queued_job_ids(name)
                in_redis.update(decisions.run_of_job(j) for j in queued)
        deleted = 0
        for run_id, state in states.items():
            verdict = decisions.attempts_verdict(state, run_id in in_flight, run_id in in_redis)
            if verdict == "forget":
                tasks = self.runs[run_id] | {t.name for t in task_rows.get(run_id, ())}
                deleted += await forget_attempts(queue.redis, queue.keys, run_id, tasks)
            if verdict != "wait":
                del self.runs[run_id]
        if deleted:
            log.info("deleted %d attempts hashes of runs that ended", deleted)
        return deleted
