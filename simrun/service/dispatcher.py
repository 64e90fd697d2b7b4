"""Sending pending units out: resolve a task's resources, check that some live worker can
run them, size the chunks, store the jobs, write the current attempts, enqueue.

The decisions are `simrun.service.decisions`; the jobs come from
`simrun.service.dispatch.build_jobs`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from simrun.plugins import TaskType
from simrun.queues import JobQueue, WorkerInfo, set_current_attempts
from simrun.resources import ResolvedResources, ResourceKey, ResourceStore, resource_key
from simrun.runstate import TaskCounts, TaskState
from simrun.runstore import RunRow, RunStore, TaskRow
from simrun.service import decisions
from simrun.service.dispatch import build_jobs
from simrun.service.settings import ControllerSettings
from simrun.workflow import ResourceOverride

__all__ = ["Dispatcher"]

log = logging.getLogger("simrun.service.controller")


@dataclass
class Dispatcher:
    """The dispatch step over the controller's stores and queue."""

    store: RunStore
    resources: ResourceStore
    queue: JobQueue
    types: Mapping[str, TaskType]
    settings: ControllerSettings

    async def dispatch(self, workers: Sequence[WorkerInfo]) -> bool:
        """Send out pending units of every running run, within the window of each queue."""
        in_flight = await self.store.jobs_in_flight()
        capacities = [
            decisions.WorkerCapacity(w.id, w.queues, w.memory_gb, w.processes, w.gpus)
            for w in workers
            if not w.stopping
        ]
        changed = False
        for run in await self.store.runs(limit=1_000_000, states=["running"]):
            counts = await self.store.counts(run.id)
            for task in await self.store.tasks(run.id):
                c = counts.get(task.name)
                if task.state not in ("running", "merging", "blocked") or c is None:
                    continue
                if c.pending or c.merge == "pending":
                    changed |= await self.dispatch_task(run, task, c, capacities, in_flight)
        return changed

    async def resolve(self, run: RunRow, task: TaskRow, task_type: TaskType) -> ResolvedResources:
        override = dict(task.override or {})
        if task.memory_override_gb is not None:
            override["memory_per_worker_gb"] = task.memory_override_gb
        key = (
            ResourceKey.from_text(task.resource_key)
            if task.resource_key
            else resource_key(task_type, task.settings, run.model)
        )
        return await self.resources.resolve(
            key, task_type.hint, ResourceOverride(**override) if override else None
        )

    async def dispatch_task(
        self,
        run: RunRow,
        task: TaskRow,
        counts: TaskCounts,
        capacities: Sequence[decisions.WorkerCapacity],
        in_flight: dict[str, int],
    ) -> bool:
        s = self.settings
        task_type = self.types.get(task.type)
        if task_type is None:
            return False  # _start failed the task; a restarted service may have lost a plugin
        resolved = await self.resolve(run, task, task_type)
        queue = decisions.queue_name(task_type.image, resolved.gpus)
        merge = counts.merge == "pending" and counts.done == counts.total
        kind = "merge" if merge else ("chunk" if task.splittable else "command")
        now = time.time()
        problem = decisions.fit_problem(
            kind,
            queue,
            resolved.memory_base_gb,
            resolved.memory_per_worker_gb,
            resolved.gpus,
            task_type.uses_cores,
            capacities,
        )
        if problem is not None:
            if task.state != "blocked" or task.status != problem:
                await self.store.set_task(
                    run.id, task.name, state="blocked", status=problem, now_s=now
                )
                log.warning("run %s task %s blocked: %s", run.id, task.name, problem)
                return True
            return False
        room = s.window_jobs - in_flight.get(queue, 0)
        if room <= 0:
            return False
        processes = sum(c.processes for c in capacities if queue in c.queues)
        if kind == "chunk":
            size = decisions.chunk_size(
                resolved.seconds_per_unit,
                counts.pending,
                processes,
                target_s=s.target_job_s,
                max_chunk=s.max_chunk,
            )
            units = await self.store.pending_units(run.id, task.name, room * size, kind="chunk")
            chunks = decisions.split(units, size)
        else:
            units = await self.store.pending_units(run.id, task.name, 1, kind=kind)  # type: ignore[arg-type]  # merge or command
            chunks = [tuple(units)] if units else []
        if not chunks:
            return False
        planned = build_jobs(s.store, task, task_type, resolved, queue, chunks, s.unit_timeout_s)
        state: TaskState = "merging" if kind == "merge" else "running"
        async with self.store.transaction() as conn:
            await self.store.add_jobs([d.job for d in planned], now, conn=conn)
            await self.store.set_task(
                run.id,
                task.name,
                state=state if task.state == "blocked" else None,
                status="" if task.state == "blocked" or task.status else None,
                queue=queue,
                resources=asdict(resolved),
                now_s=now,
                conn=conn,
            )
        in_flight[queue] = in_flight.get(queue, 0) + len(planned)
        attempts = {k: d.job.attempt for d in planned for k in d.spec.units}
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
