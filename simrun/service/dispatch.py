"""Sending pending units out: resolve a task's resources, check that some live worker can
run them, size the chunks, store the jobs, write the current attempts, enqueue.

The rules are `simrun.core.sizing` and `simrun.service.decisions`; the jobs come from
`simrun.service.packing.build_jobs`.

A task whose key has no history (its memory is the hint's or the default) probes first
when `sizing.probe_units` says it is worth it: only the probe's units go out, one per job,
and its status says so (`sizing.probe_status`). The rest is held while a probe job is in
flight; the probe's reports (successes or kills) give the key observations, the ingest
drops the key from the resolve cache, and once every probe unit reported the next dispatch
sends the rest with the learned request. Nothing of the probe is kept in memory:
the status, the jobs in flight and the key's observations are all in SQLite, so a service
restarted meanwhile goes on as it would have. A probe that ended without an observation
(its units never measured anything) lets the rest go out with the hint; a probe sent back
(its worker died) is probed again.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from simrun.core import sizing
from simrun.core.clock import SYSTEM_CLOCK, Clock
from simrun.core.reports import WorkerInfo
from simrun.core.states import ACTIVE_TASK_STATES, TaskState, UnitKind, UnitRow
from simrun.plugins import TaskType
from simrun.queues.client import JobQueue, set_current_attempts
from simrun.resources import ResolvedResources, ResourceKey, ResourceStore, resource_key
from simrun.runstore.rows import RunRow, TaskRow
from simrun.runstore.store import RunStore
from simrun.service.packing import Dispatch, build_jobs, memory_groups, task_paths
from simrun.service.settings import ControllerSettings
from simrun.workflow import ResourceOverride

log = logging.getLogger(__name__)

#: How many input sizes and resolved resources the dispatcher keeps before starting afresh.
_KEEP_SIZES = 10_000


def input_bytes(paths: Iterable[Path]) -> int | None:
    """The size of a task's inputs: the bytes of the files under ``paths`` (symbolic links
    not followed), None when the task has no input or one is missing (the learner then
    fits memory without sizes)."""
    total = 0
    seen = False
    for path in paths:
        seen = True
        try:
            if path.is_file():
                total += path.stat().st_size
                continue
            if not path.is_dir():
                return None
            for root, _, files in os.walk(path):
                total += sum(os.lstat(os.path.join(root, name)).st_size for name in files)
        except OSError:
            return None
    return total if seen else None


def unlearned(resolved: ResolvedResources) -> bool:
    """Whether resolved resources come from no observation of their key: the hint's or the
    default (an override or anything learned, a kill included, is not)."""
    return resolved.samples == 0 and resolved.source in ("plugin hint", "default")


@dataclass
class Dispatcher:
    """The dispatch step over the controller's stores and queue."""

    store: RunStore
    resources: ResourceStore
    queue: JobQueue
    types: Mapping[str, TaskType]
    settings: ControllerSettings
    #: Resolved resources by (key, type, override, input size), kept by the controller
    #: across steps and dropped for a key when it records new observations.
    cache: dict[tuple[str, str, str, int | None], ResolvedResources] = field(default_factory=dict)
    clock: Clock = SYSTEM_CLOCK
    #: The size of each started task's inputs, measured once (None: not measurable).
    sizes: dict[tuple[str, str], int | None] = field(default_factory=dict)

    async def dispatch(self, workers: Sequence[WorkerInfo]) -> bool:
        """Send out pending units of every running run, within the window of each queue."""
        in_flight = await self.store.jobs_in_flight()
        capacities = [
            sizing.WorkerCapacity(
                w.id, w.queues, w.memory_gb, w.processes, w.gpus, w.free_scratch_gb
            )
            for w in workers
            if not w.stopping
        ]
        changed = False
        for run in await self.store.running_runs():
            tasks = [
                t
                for t in await self.store.tasks(run.id)
                if t.state in ACTIVE_TASK_STATES
                # a queue whose window is full takes nothing: skip the queries
                and (t.queue is None or in_flight.get(t.queue, 0) < self.settings.window_jobs)
            ]
            if not tasks:
                continue
            pending = await self.store.pending_counts(run.id)
            for task in tasks:
                if pending.get(task.name):
                    changed |= await self.dispatch_task(
                        run, task, pending[task.name], capacities, in_flight
                    )
        return changed

    async def resolve(self, run: RunRow, task: TaskRow, task_type: TaskType) -> ResolvedResources:
        """The resources of a task now (cached until its key learns something new)."""
        override = dict(task.override or {})
        if task.memory_override_gb is not None:
            override["memory_per_worker_gb"] = task.memory_override_gb
        key = (
            ResourceKey.from_text(task.resource_key)
            if task.resource_key
            else resource_key(task_type, task.settings, run.model)
        )
        size = await self.input_size(task)
        cache_key = (key.text(), task_type.name, json.dumps(override, sort_keys=True), size)
        found = self.cache.get(cache_key)
        if found is None:
            if len(self.cache) >= _KEEP_SIZES:
                self.cache.clear()
            found = await self.resources.resolve(
                key, task_type.hint, ResourceOverride(**override) if override else None, size
            )
            self.cache[cache_key] = found
        return found

    async def input_size(self, task: TaskRow) -> int | None:
        """The size of a task's inputs (its upstream outputs and sources), measured in a
        thread the first time and kept: a started task's inputs no longer change."""
        where = (task.run, task.name)
        if where not in self.sizes:
            if len(self.sizes) >= _KEEP_SIZES:  # ended tasks' sizes: measured again if needed
                self.sizes.clear()
            paths = task_paths(self.settings.store, task).inputs.values()
            self.sizes[where] = await asyncio.to_thread(input_bytes, list(paths))
        return self.sizes[where]

    async def dispatch_task(
        self,
        run: RunRow,
        task: TaskRow,
        pending: Mapping[str, int],
        capacities: Sequence[sizing.WorkerCapacity],
        in_flight: dict[str, int],
    ) -> bool:
        """Dispatch what one task has pending: its merge, its command, or chunks of units."""
        s = self.settings
        task_type = self.types.get(task.type)
        if task_type is None:
            return False  # _start failed the task; a restarted service may have lost a plugin
        resolved = await self.resolve(run, task, task_type)
        queue = sizing.queue_name(run.task_image(task_type.image), resolved.gpus)
        room = s.window_jobs - in_flight.get(queue, 0)
        if room <= 0:
            return False
        now = self.clock.now()
        merge = pending.get("merge", 0) > 0
        probe, todo = 0, pending.get("chunk", 0)
        if merge or not task.splittable:
            kind: UnitKind = "merge" if merge else "command"
            units = await self.store.pending_rows(run.id, task.name, 1, kind=kind, now_s=now)
            chunks: list[Sequence[UnitRow] | range] = [tuple(units)] if units else []
        else:
            processes = sum(c.processes for c in capacities if queue in c.queues)
            probe = await self._probe(run, task, resolved, todo, processes)
            if probe < 0:
                return False  # the probe is out: the rest waits for its report
            if probe:  # one unit per job, so that each process of the probe reports alone
                size, limit = 1, probe
            else:
                size = sizing.chunk_size(
                    resolved.seconds_per_unit,
                    todo,
                    processes,
                    target_s=s.target_job_s,
                    max_chunk=s.max_chunk,
                )
                limit = min(room * size, max(size, s.dispatch_units))
            # Units sent back first (they have rows), then fresh ones from the frontier.
            units = await self.store.pending_rows(run.id, task.name, limit, kind="chunk", now_s=now)
            groups = memory_groups(units, resolved.memory_per_worker_gb)
            cut = [sizing.split(g, size, pending=todo, processes=processes) for g in groups]
            chunks = list(itertools.islice((c for g in cut for c in g), room))
            if len(chunks) < room and len(units) < limit:
                fresh = await self.store.fresh_units(run.id, task.name)
                # The tail of the task tapers (the fresh units are its last ones).
                chunks += sizing.split_range(
                    fresh[: limit - len(units)], size, pending=len(fresh), processes=processes
                )[: room - len(chunks)]
        if not chunks:
            return False
        timeout_s = (task.retry or {}).get("timeout_s") or s.unit_timeout_s
        planned = build_jobs(
            s.store, task, task_type, resolved, queue, chunks, timeout_s, run_image=run.image
        )
        problem = next(
            filter(None, (self._fit(d, queue, task_type, capacities) for d in planned)), None
        )
        if problem is not None:
            if task.state != "blocked" or task.status != problem:
                await self.store.set_task(
                    run.id, task.name, state="blocked", status=problem, now_s=now
                )
                log.warning("run %s task %s blocked: %s", run.id, task.name, problem)
                return True
            return False
        state: TaskState = "merging" if merge else "running"
        status = "" if task.state == "blocked" or task.status else None
        if probe:
            sent = (task.units or 0) - todo + sum(len(c) for c in chunks)
            status = sizing.probe_status(sent, (task.units or 0) - sent)
            log.info("run %s task %s: %s", run.id, task.name, status)
        async with self.store.transaction() as conn:
            await self.store.add_jobs([d.job for d in planned], now, conn=conn)
            await self.store.set_task(
                run.id,
                task.name,
                state=state if task.state == "blocked" else None,
                status=status,
                queue=queue,
                resources={**asdict(resolved), "input_bytes": await self.input_size(task)},
                now_s=now,
                conn=conn,
            )
        in_flight[queue] = in_flight.get(queue, 0) + len(planned)
        # A fresh job's units were never dispatched before: no attempt to record.
        attempts = {k: d.job.attempt for d in planned if d.job.attempt > 1 for k in d.spec.units}
        await set_current_attempts(self.queue.redis, self.queue.keys, run.id, task.name, attempts)
        results = await self.queue.enqueue_many(
            [d.spec for d in planned], concurrency=s.enqueue_concurrency
        )
        refused = [d.job.id for d, ok in zip(planned, results, strict=True) if not ok]
        if refused:
            # The id is taken (a result of that attempt still lives): go again with a new one.
            await self.store.release_jobs(refused, "the job id was taken in Redis")
            log.warning("run %s task %s: %d job ids were taken", run.id, task.name, len(refused))
        return True

    async def _probe(
        self, run: RunRow, task: TaskRow, resolved: ResolvedResources, todo: int, processes: int
    ) -> int:
        """What the chunk units of a task do now: -1 wait (its probe is out), 0 go out as
        usual, n > 0 go out as a probe of n units.

        Derived from what SQLite holds, so that a restart neither loses nor repeats a probe:
        the task's status says it probes, and jobs of the task are in flight (nothing but
        the probe went out). The rest waits until every probe unit reported, so that it is
        sized from all of their peaks, not the first one's (the replay of
        benchmarks/learning.py: 0.38x the preset's waste on the campaign instead of 0.53x).
        A task of a key with no history none of whose units went out yet may start one
        (`sizing.probe_units`); a probe smaller than the processes now live allow (it went
        out before the workers' first heartbeats) is topped up to one unit per process
        while the key has learned nothing."""
        if not self.settings.probe:
            return 0
        total = task.units or 0
        wanted = sizing.probe_units(total, processes, resolved.seconds_per_unit)
        sent = total - todo
        fresh = unlearned(resolved)
        if sizing.is_probing(task.status):
            jobs = await self.store.jobs(run.id)
            if any(j.task == task.name for j in jobs):
                return wanted - sent if fresh and wanted > sent else -1
            # every probe unit reported, or the probe came back (its worker died): probe
            # again while nothing is learned, else the rest goes out
            return wanted if fresh and sent <= 0 else 0
        if not fresh or sent > 0:
            return 0
        return wanted

    @staticmethod
    def _fit(
        planned: Dispatch,
        queue: str,
        task_type: TaskType,
        capacities: Sequence[sizing.WorkerCapacity],
    ) -> str | None:
        res = planned.spec.resources
        return sizing.fit_problem(
            planned.spec.kind,
            queue,
            res.memory_base_gb,
            res.memory_per_worker_gb,
            res.gpus,
            task_type.uses_cores,
            capacities,
            scratch_gb=res.scratch_gb,
        )
