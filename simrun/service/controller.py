"""The controller: walks the runs, dispatches their units, ingests the workers' reports and
keeps SQLite (the truth) and Redis (the queues, which may be lost) in agreement.

One `Controller.step` does, in order:

1. **ingest** the report stream in batches (consumer group): the unit outcomes and the
   observations of a batch are written in one transaction, then acknowledged;
2. **watch** the workers' heartbeats: jobs a live worker holds mark their units running on
   it; the jobs of a worker whose heartbeat expired, and the jobs arq holds in progress
   that no live worker has listed for longer than a heartbeat lives (their worker died
   before a heartbeat named them), are dispatched again (new attempt) and dropped from
   arq, which would keep them blocked for its job timeout;
3. **reconcile** (at start and every ``reconcile_s``): jobs in flight that are neither in a
   queue nor on a live worker (Redis lost them) are dispatched again;
4. **advance**: tasks whose inputs are done start (``count_units`` in a thread), tasks whose
   units are all done get their merge or are done, runs end succeeded, failed or stay;
5. **dispatch**: pending units go out in chunks sized from the learned seconds per unit,
   within a window of jobs in flight per queue; a request no live worker can ever fit
   leaves its task ``blocked`` with a status that says so, re-checked every step;
6. **forget** (at most every `FORGET_EVERY_S`): the attempts hashes of runs that ended are
   deleted from Redis once no job of them is left there (`decisions.attempts_verdict`).
   The runs watched are those this controller saw end or cancelled, and, once after a
   start, those a SCAN of the namespace's hashes finds (left by an earlier service).

The decisions are the plain functions of `simrun.core.states` and `simrun.service.decisions`;
this module gathers the facts and applies the answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from simrun.core.reports import ReportEntry, WorkerInfo, WorkerReport
from simrun.plugins import TaskType, load_plugin_ref, load_task_types
from simrun.queues import JobQueue, set_current_attempts
from simrun.resources import (
    KeySummary,
    Record,
    ResolvedResources,
    ResourceKey,
    ResourceStore,
)
from simrun.runstore import JobRow, ReplayError, RunRow, RunStore, TaskRow
from simrun.service import decisions
from simrun.service.advance import advance_run
from simrun.service.dispatch import Dispatcher
from simrun.service.forget import FORGET_EVERY_S, EndedRuns
from simrun.service.settings import ControllerSettings
from simrun.service.submit import (
    copy_sources,
    new_run_id,
    plan_run,
    remove_run_dir,
    source_paths,
)
from simrun.service.views import FailureView, RunView, failure_view, run_view
from simrun.workflow import Workflow

__all__ = ["Controller", "ControllerSettings", "ReplayError", "is_oom", "load_types"]

log = logging.getLogger(__name__)


def is_oom(entry_or_report: ReportEntry | WorkerReport) -> bool:
    """Whether a report says a worker process was killed for memory: the worker's own
    verdict (its sampler killed the process past its limit), or a unit reported killed."""
    if isinstance(entry_or_report, WorkerReport):
        return entry_or_report.killed_for_memory
    return entry_or_report.report.killed_for_memory or any(
        outcome == "killed" for outcome in entry_or_report.outcomes.values()
    )


def load_types(plugins: Sequence[str] = ()) -> dict[str, TaskType]:
    """The installed task types plus those named by ``plugins`` ("module:OBJECT", see
    `simrun.plugins.load_plugin_ref`), as the worker's ``--plugins`` option loads them."""
    types = load_task_types()
    for ref in plugins:
        task_type = load_plugin_ref(ref)
        types[task_type.name] = task_type
    return types


class Controller:
    """The service's controller over a run store, a resource store and a job queue.

    Make one with `open`; drive it with `run_forever` (or `step`). `submit`, `replay` and
    `cancel` may be called concurrently with the loop; the read methods never wait for it.
    """

    def __init__(
        self,
        settings: ControllerSettings,
        types: Mapping[str, TaskType],
        store: RunStore,
        resources: ResourceStore,
        queue: JobQueue,
    ) -> None:
        self.settings = settings
        self.types = dict(types)
        self.store = store
        self.resources = resources
        self.queue = queue
        self._lock = asyncio.Lock()
        self._pending_read = True  # first read what was delivered before a restart
        self._drained = False
        self._last_reconcile = -float("inf")
        #: The error of the last step, None after a step that went well.
        self.last_error: str | None = None
        self._dirty: set[str] = set()  # runs whose tasks may move (see _advance)
        self._all_dirty = True
        self._seen: dict[str, tuple[str, bool]] = {}  # sightings already written
        #: Jobs arq holds in progress that no live worker lists: since when (monotonic).
        self._held_since: dict[str, float] = {}
        self._resolved: dict[tuple[str, str, str], ResolvedResources] = {}
        self._ended = EndedRuns()  # runs whose attempts hashes may go
        self._last_forget = -float("inf")

    @classmethod
    async def open(cls, settings: ControllerSettings, types: Mapping[str, TaskType]) -> Controller:
        """Open the stores (creating the file) and connect to Redis."""
        store = await RunStore.open(settings.database)
        try:
            resources = ResourceStore(settings.database)
            await resources.ensure_schema(store.connection)
            queue = await JobQueue.connect(settings.redis_url, settings.prefix)
        except BaseException:
            await store.close()
            raise
        return cls(settings, types, store, resources, queue)

    async def close(self) -> None:
        """Close Redis and both stores (the resource store's idle connection too, so no WAL
        file is left behind)."""
        await self.queue.close()
        await self.store.close()
        self.resources.close()

    # -- the loop ---------------------------------------------------------------------------

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Step until ``stop`` is set (or the task is cancelled).

        Redis being away is logged and waited out (SQLite keeps the state). Any other error
        of a step is logged with its traceback and kept in ``last_error`` (the health of
        the service shows it), and the loop goes on after a pause rather than leaving the
        runs without a controller.
        """
        stop = stop or asyncio.Event()
        while not stop.is_set():
            pause = self.settings.poll_s
            try:
                busy = await self.step()
                self.last_error = None
            except (RedisError, OSError) as exc:
                log.warning("controller step failed, Redis unreachable? %s", exc)
                self.last_error = f"Redis unreachable: {exc}"
                busy, pause = False, max(pause, 0.5)
            except Exception as exc:  # kept, logged, and the loop goes on
                log.exception("controller step failed")
                self.last_error = f"{type(exc).__name__}: {exc}"
                busy, pause = False, max(pause, 1.0)
            if not busy:
                try:
                    await asyncio.wait_for(stop.wait(), pause)
                except TimeoutError:
                    continue

    async def step(self) -> bool:
        """One round of the loop; True when it changed something."""
        async with self._lock:
            workers = await self.queue.live_workers()
            busy = await self._ingest()
            busy |= await self._watch(workers)
            now = time.monotonic()
            if now - self._last_reconcile >= self.settings.reconcile_s:
                self._last_reconcile = now
                busy |= await self._reconcile()
            busy |= await self._advance()
            busy |= await self._dispatch(workers)
            if now - self._last_forget >= FORGET_EVERY_S:
                self._last_forget = now
                await self._ended.sweep(self.store, self.queue, workers)
            return busy

    # -- 1. reports -------------------------------------------------------------------------

    async def _ingest(self) -> bool:
        """Apply up to ``report_batches`` batches of reports; sets ``_drained`` when the
        stream had no more."""
        s = self.settings
        changed = False
        self._drained = False
        for _ in range(s.report_batches):
            batch = await self.queue.read_reports(
                s.group, s.consumer, count=s.report_batch, block_ms=None, pending=self._pending_read
            )
            if not batch:
                if self._pending_read:
                    self._pending_read = False
                    continue
                self._drained = True
                break
            entries = [b.entry for b in batch if b.entry is not None]
            for bad in batch:
                if bad.entry is None:
                    log.error("dropped report %s: %s", bad.id, bad.problem)
            try:
                if entries:
                    changed |= await self._apply(entries)
                await self.queue.ack(s.group, [b.id for b in batch])
            except BaseException:
                # Not acknowledged: read the delivered entries again before new ones.
                self._pending_read = True
                raise
        return changed

    async def _apply(self, entries: Sequence[ReportEntry]) -> bool:
        tasks: dict[tuple[str, str], TaskRow] = {}
        for run_id in {e.run for e in entries}:
            tasks.update({(t.run, t.name): t for t in await self.store.tasks(run_id)})
        now = time.time()
        async with self.store.transaction() as conn:
            applied = await self.store.apply_reports(
                entries, conn=conn, limits=self.settings.limits, now_s=now
            )
            records = [r for e in applied.recorded if (r := _record(e, tasks)) is not None]
            await self.resources.record_many(records, conn)
            for (run_id, task), message in applied.refused.items():
                await self.store.set_task(run_id, task, status=message, conn=conn)
        self._dirty.update(run_id for run_id, _ in applied.touched)
        learned = {r.key.text() for r in records}
        for cached in [k for k in self._resolved if k[0] in learned]:
            del self._resolved[cached]
        return applied.changed > 0

    # -- 2. heartbeats ----------------------------------------------------------------------

    async def _watch(self, workers: Sequence[WorkerInfo]) -> bool:
        sightings = {
            job.job_id: (w.id, job.state == "running") for w in workers for job in w.running
        }
        news = {job: seen for job, seen in sightings.items() if self._seen.get(job) != seen}
        changed = await self.store.see_jobs(news, time.time()) > 0 if news else False
        self._seen = sightings
        if not self._drained:
            return changed  # a report still unread may be the end of a job of a gone worker
        live = {w.id for w in workers}
        rows = await self.store.jobs()
        dead = set(decisions.dead_worker_jobs(_flight(rows), live))
        if dead:
            by_worker: dict[str, list[JobRow]] = defaultdict(list)
            for row in rows:
                if row.id in dead and row.worker is not None:
                    by_worker[row.worker].append(row)
            for worker, jobs in by_worker.items():
                released = await self._give_up(
                    jobs, f"worker {worker} stopped answering (its heartbeat expired)"
                )
                log.warning(
                    "worker %s is gone: %d jobs (%d units) dispatched again",
                    worker,
                    len(jobs),
                    released,
                )
            changed = True
        return await self._abandoned([r for r in rows if r.id not in dead], sightings) or changed

    async def _abandoned(self, rows: Sequence[JobRow], listed: Mapping[str, object]) -> bool:
        """Dispatch again the jobs arq holds in progress that no live worker listed for
        longer than a heartbeat lives: their worker took them and died before it said so."""
        unlisted = [r.id for r in rows if r.id not in listed]
        held = await self.queue.held_in_progress(unlisted) if unlisted else set()
        self._held_since, abandoned = decisions.abandoned_jobs(
            held, listed, self._held_since, time.monotonic(), self.settings.heartbeat_ttl_s
        )
        if not abandoned:
            return False
        chosen = set(abandoned)
        released = await self._give_up(
            [r for r in rows if r.id in chosen],
            "its worker took it and stopped answering before it said so",
        )
        log.warning(
            "%d jobs (%d units) held in progress by no live worker: dispatched again",
            len(abandoned),
            released,
        )
        return True

    async def _give_up(self, jobs: Sequence[JobRow], reason: str) -> int:
        """Drop jobs from arq and put their units back to pending (dispatched again with a
        newer attempt); returns the units released. Dropped first: should the service stop
        in between, reconciling finds the jobs gone from Redis and releases them then."""
        by_queue: dict[str, list[str]] = defaultdict(list)
        for job in jobs:
            by_queue[job.queue].append(job.id)
            self._dirty.add(job.run)
        for queue, job_ids in by_queue.items():
            await self.queue.drop_jobs(queue, job_ids)
        return await self.store.release_jobs([j.id for j in jobs], reason)

    # -- 3. reconcile -----------------------------------------------------------------------

    async def _reconcile(self) -> bool:
        """Dispatch again the jobs in flight that Redis no longer knows of."""
        flight = await self.store.jobs()
        if not flight:
            return False
        snapshot_s = time.time()
        queued: set[str] = set()
        for name in sorted({j.queue for j in flight}):
            queued.update(await self.queue.queued_job_ids(name))
        on_workers = {j.job_id for w in await self.queue.live_workers() for j in w.running}
        while True:  # every report written before the snapshot must be applied first
            await self._ingest()
            if self._drained:
                break
        self._all_dirty = True  # a full pass of _advance now and then, whatever happened
        orphans = await self.store.release_orphans()
        if orphans:
            log.error("%d units were queued without a job in flight: dispatched again", orphans)
        after = _flight(await self.store.jobs())
        lost = decisions.lost_jobs(after, queued, on_workers, snapshot_s)
        if not lost:
            return orphans > 0
        released = await self.store.release_jobs(
            lost, "lost from Redis: neither in a queue nor on a live worker"
        )
        log.warning(
            "%d jobs (%d units) were lost from Redis: dispatched again", len(lost), released
        )
        self._all_dirty = True
        return True

    # -- 4. tasks and runs ---------------------------------------------------------------

    async def _advance(self) -> bool:
        """Advance the runs that changed since the last step (all of them now and then)."""
        everything, dirty = self._all_dirty, self._dirty
        self._all_dirty, self._dirty = False, set()
        changed = False
        try:
            for run in await self.store.runs(limit=1_000_000, states=["running"]):
                if (everything or run.id in dirty) and await advance_run(
                    self.store, self.types, run
                ):
                    changed = True
                    after = await self.store.run(run.id)
                    if after is not None and after.state != "running":
                        self._ended.watch(run.id)
        except BaseException:
            self._all_dirty = True
            raise
        return changed

    # -- 5. dispatch ------------------------------------------------------------------------

    async def _dispatch(self, workers: Sequence[WorkerInfo]) -> bool:
        dispatcher = Dispatcher(
            self.store, self.resources, self.queue, self.types, self.settings, self._resolved
        )
        return await dispatcher.dispatch(workers)

    # -- 6. attempts of runs that ended ------------------------------------------------------

    async def forget_ended(self) -> int:
        """Delete the attempts hashes of the runs that ended and have no job left in Redis
        now (as a step does every `FORGET_EVERY_S`); returns how many were deleted."""
        async with self._lock:
            return await self._ended.sweep(self.store, self.queue, await self.queue.live_workers())

    # -- commands ---------------------------------------------------------------------------

    async def submit(
        self,
        doc: Workflow,
        settings_by_task: Mapping[str, dict[str, Any]],
        text: str,
        *,
        base: Path | None = None,
        uploaded: Mapping[str, Path] | None = None,
    ) -> str:
        """Create a run of a checked document (``settings_by_task`` is what
        `simrun.workflow.check_workflow` returned) and return its id.

        Sources are read from ``uploaded`` (name → file) or from the document's paths
        relative to ``base``, and copied into the run's directory first; a document that
        cannot run raises `simrun.workflow.WorkflowError` and leaves nothing behind.
        """
        now = time.time()
        sources = source_paths(doc, base, uploaded)
        run_id = new_run_id(now)
        run_dir = self.settings.store / "runs" / run_id
        new = plan_run(run_id, doc, settings_by_task, self.types, run_dir, sources, text, now)
        try:
            await asyncio.to_thread(copy_sources, run_dir, sources)
            async with self._lock:
                await self.store.create_run(new)
                self._dirty.add(run_id)
        except BaseException:
            await asyncio.to_thread(remove_run_dir, run_dir)
            raise
        log.info("run %s submitted: %d tasks", run_id, len(new.tasks))
        return run_id

    async def replay(
        self,
        run_id: str,
        task: str | None = None,
        indices: Sequence[int] = (),
        memory_gb: float | None = None,
    ) -> int:
        """Put failed units back (all, of one task, or some indices of it; optionally with
        a memory per process) and let the run go on; done units are never recomputed.
        Returns the units replayed; `ReplayError` says why there are none."""
        async with self._lock:
            count = await self.store.replay(
                run_id, time.time(), task=task, indices=indices, memory_gb=memory_gb
            )
            self._dirty.add(run_id)
        log.info("run %s: %d units replayed", run_id, count)
        return count

    async def cancel(self, run_id: str) -> int:
        """Cancel a running run: nothing more is dispatched, and workers skip its units that
        are still queued (they are marked stale: their attempts are raised, and the hashes
        stay until no job of the run is left in Redis). Returns the units that were in
        flight."""
        async with self._lock:
            active = await self.store.cancel(run_id, time.time())
            by_task: dict[str, dict[int | str, int]] = defaultdict(dict)
            for unit in active:
                by_task[unit.task][unit.key] = unit.attempt + 1
            for task, attempts in by_task.items():
                await set_current_attempts(
                    self.queue.redis, self.queue.keys, run_id, task, attempts
                )
            # Its hashes stay until the workers skipped the jobs still queued.
            self._ended.watch(run_id)
        log.info("run %s cancelled (%d units were in flight)", run_id, len(active))
        return len(active)

    # -- reading ----------------------------------------------------------------------------

    async def runs(self, limit: int = 100) -> list[RunRow]:
        """The latest runs first."""
        return await self.store.runs(limit=limit)

    async def run(self, run_id: str) -> RunView | None:
        """One run with per-task unit counts by state and ETAs; None when unknown."""
        row = await self.store.run(run_id)
        if row is None:
            return None
        processes: dict[str, int] = defaultdict(int)
        for w in await self.queue.live_workers():
            for name in w.queues:
                processes[name] += w.processes
        return run_view(
            row, await self.store.tasks(run_id), await self.store.counts(run_id), processes
        )

    async def failures(self, run_id: str) -> list[FailureView]:
        """The failed units of a run with their tracebacks."""
        return [failure_view(u) for u in await self.store.failures(run_id)]

    async def resources_by_key(self) -> list[KeySummary]:
        """What is learned per resource key."""
        return await self.resources.summaries({n: t.hint for n, t in self.types.items()})

    async def wait(self, run_id: str, timeout_s: float, poll_s: float = 0.05) -> RunRow:
        """The run once it ended; `TimeoutError` after ``timeout_s`` (for embedded mode and
        tests; the loop must be running elsewhere)."""
        deadline = time.monotonic() + timeout_s
        while True:
            row = await self.store.run(run_id)
            if row is None:
                raise ReplayError(f"there is no run {run_id!r}")
            if row.state != "running":
                return row
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} still running after {timeout_s:g} s")
            await asyncio.sleep(poll_s)


def _record(entry: ReportEntry, tasks: Mapping[tuple[str, str], TaskRow]) -> Record | None:
    """The observation of a report, or None when it measured nothing worth learning from
    (a merge, or a job whose units never ran)."""
    task = tasks.get((entry.run, entry.task))
    if task is None or task.resource_key is None or entry.kind == "merge":
        return None
    oom = is_oom(entry)
    if oom and not entry.report.limit_gb > 0:
        return None
    if not oom and (not entry.report.peak_memory_gb or entry.report.units <= 0):
        return None
    base_gb = float((task.resources or {}).get("memory_base_gb") or 0.0)
    return Record(ResourceKey.from_text(task.resource_key), entry.report, base_gb, oom, entry.run)


def _flight(jobs: Sequence[JobRow]) -> list[decisions.FlightJob]:
    return [decisions.FlightJob(j.id, j.worker, j.enqueued_s) for j in jobs]
