"""Steps 2 and 3 of the controller: the jobs of dead workers, abandoned jobs (watch) and
jobs Redis lost (reconcile) are dispatched again; workers whose clock is off are warned
about; `HealthSnapshot` is what ``GET /health`` answers from."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simrun.core.clock import Clock, Every
from simrun.core.reports import WorkerInfo
from simrun.core.timing import clock_skew_warning
from simrun.queues.client import JobQueue
from simrun.runstore.rows import JobRow
from simrun.runstore.store import RunStore
from simrun.service import decisions
from simrun.service.advance import RunsToAdvance
from simrun.service.ingest import Ingest
from simrun.service.settings import ControllerSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthSnapshot:
    """What the controller's loop last found (``GET /health`` answers from it, never asking
    Redis or SQLite itself): whether Redis answered, the live workers, and when (monotonic)."""

    redis_ok: bool
    workers: int
    at_s: float


def listed_jobs(workers: Sequence[WorkerInfo]) -> dict[str, tuple[str, bool]]:
    """The jobs the heartbeats of ``workers`` list: job id → (worker id, whether it runs)."""
    return {job.job_id: (w.id, job.state == "running") for w in workers for job in w.running}


def flight(jobs: Sequence[JobRow]) -> list[decisions.FlightJob]:
    """Jobs in flight as the liveness rules see them."""
    return [decisions.FlightJob(j.id, j.worker, j.enqueued_s) for j in jobs]


class Liveness:
    """The watch and reconcile steps over the controller's store and queue."""

    def __init__(
        self,
        settings: ControllerSettings,
        store: RunStore,
        queue: JobQueue,
        ingest: Ingest,
        advance: RunsToAdvance,
        clock: Clock,
    ) -> None:
        self.settings, self.store, self.queue = settings, store, queue
        self.ingest, self.advance, self.clock = ingest, advance, clock
        self._seen: dict[str, tuple[str, bool]] = {}  # sightings already written
        #: Jobs arq holds in progress that no live worker lists: since when (monotonic).
        self._held_since: dict[str, float] = {}
        #: When a reconciliation is due (at start, and after Redis came back).
        self.reconcile_every = Every(clock, settings.reconcile_s)
        #: The live workers whose clock skew was warned about (again once it came back).
        self._skewed: set[str] = set()

    def warn_skew(self, workers: Sequence[WorkerInfo]) -> None:
        """Log once per worker whose clock is further from Redis's than the bound."""
        skewed = set()
        for w in workers:
            warning = clock_skew_warning(w.clock_skew_s)
            if warning is None:
                continue
            skewed.add(w.id)
            if w.id not in self._skewed:
                log.warning("worker %s on %s: %s", w.id, w.host, warning)
        self._skewed = skewed

    def redis_back(self) -> None:
        """Redis came back: forget what was watched, and reconcile once workers are judged."""
        self._held_since.clear()
        self._seen.clear()
        self.reconcile_every.reset()

    async def watch(self, workers: Sequence[WorkerInfo], judge: bool = True) -> bool:
        """Write what the heartbeats say and (``judge``) dispatch again the jobs of dead
        workers and abandoned ones; True when something changed."""
        self.warn_skew(workers)
        sightings = listed_jobs(workers)
        news = {job: seen for job, seen in sightings.items() if self._seen.get(job) != seen}
        changed = await self.store.see_jobs(news, self.clock.now()) > 0 if news else False
        self._seen = sightings
        if not judge or not self.ingest.drained:
            return changed  # a report still unread may be the end of a job of a gone worker
        live = {w.id for w in workers}
        rows = await self.store.jobs()
        dead = set(decisions.dead_worker_jobs(flight(rows), live))
        if dead:
            by_worker: dict[str, list[JobRow]] = defaultdict(list)
            for row in rows:
                if row.id in dead and row.worker is not None:
                    by_worker[row.worker].append(row)
            for worker, jobs in by_worker.items():
                released = await self.give_up(
                    jobs, f"worker {worker} stopped answering (its heartbeat expired)"
                )
                log.warning(
                    "worker %s is gone: %d jobs (%d units) dispatched again",
                    worker,
                    len(jobs),
                    released,
                )
            changed = True
        return await self.abandoned([r for r in rows if r.id not in dead], sightings) or changed

    async def abandoned(self, rows: Sequence[JobRow], listed: Mapping[str, object]) -> bool:
        """Dispatch again the jobs arq holds that no live worker listed for longer than a
        heartbeat lives."""
        unlisted = [r.id for r in rows if r.id not in listed]
        held = await self.queue.held_in_progress(unlisted) if unlisted else set()
        self._held_since, abandoned = decisions.abandoned_jobs(
            held, listed, self._held_since, self.clock.monotonic(), self.settings.heartbeat_ttl_s
        )
        if not abandoned:
            return False
        chosen = set(abandoned)
        released = await self.give_up(
            [r for r in rows if r.id in chosen],
            "its worker took it and stopped answering before it said so",
        )
        log.warning(
            "%d jobs (%d units) held in progress by no live worker: dispatched again",
            len(abandoned),
            released,
        )
        return True

    async def give_up(self, jobs: Sequence[JobRow], reason: str) -> int:
        """Drop jobs from arq, then put their units back to pending (reconciling releases
        them should the service stop in between): the units released."""
        by_queue: dict[str, list[str]] = defaultdict(list)
        for job in jobs:
            by_queue[job.queue].append(job.id)
            self.advance.mark(job.run)
        for queue, job_ids in by_queue.items():
            await self.queue.drop_jobs(queue, job_ids)
        return await self.store.release_jobs([j.id for j in jobs], reason)

    async def reconcile(self) -> bool:
        """Dispatch again the jobs in flight that Redis no longer knows of."""
        jobs = await self.store.jobs()
        if not jobs:
            return False
        snapshot_s = self.clock.now()
        queued: set[str] = set()
        for name in sorted({j.queue for j in jobs}):
            queued.update(await self.queue.queued_job_ids(name))
        on_workers = set(listed_jobs(await self.queue.live_workers()))
        await self.ingest.drain()  # every report written before the snapshot applied first
        self.advance.mark_all()  # a full pass of the advance step now and then
        orphans = await self.store.release_orphans()
        if orphans:
            log.error("%d units were queued without a job in flight: dispatched again", orphans)
        after = flight(await self.store.jobs())
        lost = decisions.lost_jobs(after, queued, on_workers, snapshot_s)
        if not lost:
            return orphans > 0
        released = await self.store.release_jobs(
            lost, "lost from Redis: neither in a queue nor on a live worker"
        )
        log.warning(
            "%d jobs (%d units) were lost from Redis: dispatched again", len(lost), released
        )
        return True
