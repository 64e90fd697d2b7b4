"""Sending pending units out: pure functions decide what to send (`probe_now`, `chunk_limit`,
`cut_chunks`, `fresh_chunks`, `plan_dispatch`); `Dispatcher` reads the stores and follows
the plan."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from simrun.core import sizing
from simrun.core.clock import SYSTEM_CLOCK, Clock
from simrun.core.reports import WorkerInfo
from simrun.core.states import ACTIVE_TASK_STATES, TaskPhase, TaskState, UnitKind, UnitRow
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

Chunk = Sequence[UnitRow] | range


def input_bytes(paths: Iterable[Path]) -> int | None:
    """The bytes of the files under ``paths`` (links not followed); None without a path or
    when one is missing."""
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
    """Whether resolved resources come from no observation of their key."""
    return resolved.samples == 0 and resolved.source in ("plugin hint", "default")


@dataclass(frozen=True)
class ResolveKey:
    """What resolved resources depend on."""

    key: str
    type: str
    override: str
    size: int | None


class ResolveCache:
    """Resolved resources by `ResolveKey`, forgotten when their key learns (`forget`)."""

    def __init__(self, keep: int = _KEEP_SIZES) -> None:
        self.keep = keep
        self._found: dict[ResolveKey, ResolvedResources] = {}

    async def get(
        self, key: ResolveKey, resolve: Callable[[], Awaitable[ResolvedResources]]
    ) -> ResolvedResources:
        found = self._found.get(key)
        if found is None:
            if len(self._found) >= self.keep:
                self._found.clear()
            found = self._found[key] = await resolve()
        return found

    def forget(self, learned: Iterable[str]) -> None:
        """Drop what was resolved for the resource keys (texts) ``learned``."""
        keys = set(learned)
        for cached in [k for k in self._found if k.key in keys]:
            del self._found[cached]

    def __len__(self) -> int:
        return len(self._found)


def probe_now(
    enabled: bool,
    task: TaskRow,
    todo: int,
    processes: int,
    resolved: ResolvedResources,
    probe_out: bool,
) -> int:
    """What the chunk units of ``task`` do now: -1 wait for the probe out, 0 go out, n > 0
    go out as a probe of n (topped up while nothing is learned)."""
    if not enabled:
        return 0
    total = task.units or 0
    wanted = sizing.probe_units(total, processes, resolved.seconds_per_unit)
    sent = total - todo
    fresh = unlearned(resolved)
    if task.phase is TaskPhase.PROBING and probe_out:
        return wanted - sent if fresh and wanted > sent else -1
    return wanted if fresh and sent <= 0 else 0


def chunk_limit(
    settings: ControllerSettings,
    resolved: ResolvedResources,
    todo: int,
    processes: int,
    room: int,
    probe: int,
) -> tuple[int, int]:
    """The units per job (one for a probe) and the units to send now."""
    if probe:
        return 1, probe
    size = sizing.chunk_size(
        resolved.seconds_per_unit,
        todo,
        processes,
        target_s=settings.target_job_s,
        max_chunk=settings.max_chunk,
    )
    return size, min(room * size, max(size, settings.dispatch_units))


def cut_chunks(
    units: Sequence[UnitRow], memory_gb: float, size: int, room: int, todo: int, processes: int
) -> list[Chunk]:
    """At most ``room`` jobs of the ``units`` sent back, grouped by their memory."""
    groups = memory_groups(units, memory_gb)
    cut = (c for g in groups for c in sizing.split(g, size, pending=todo, processes=processes))
    return list(itertools.islice(cut, room))


def fresh_chunks(fresh: range, take: int, size: int, room: int, processes: int) -> list[range]:
    """At most ``room`` jobs of the first ``take`` of the ``fresh`` units."""
    return sizing.split_range(fresh[:take], size, pending=len(fresh), processes=processes)[:room]


@dataclass(frozen=True)
class DispatchPlan:
    """What one dispatch writes of its task: ``blocked`` (why no worker fits), else the
    task's new ``state``, ``status`` and ``phase`` (None: unchanged)."""

    blocked: str | None = None
    state: TaskState | None = None
    status: str | None = None
    phase: TaskPhase | None = None


def plan_dispatch(
    task: TaskRow, problem: str | None, merge: bool, probe: int, todo: int, sending: int
) -> DispatchPlan | None:
    """The plan of a dispatch of ``task`` (``sending`` of ``todo`` units; ``problem``: they
    fit no worker); None: nothing to write."""
    if problem is not None:
        if task.state == "blocked" and task.status == problem:
            return None
        return DispatchPlan(blocked=problem)
    unblocked = task.state == "blocked"
    state: TaskState | None = ("merging" if merge else "running") if unblocked else None
    if probe:
        units = task.units or 0
        sent = units - todo + sending
        return DispatchPlan(None, state, sizing.probe_status(sent, units - sent), TaskPhase.PROBING)
    status = "" if unblocked or task.status else None
    phase = TaskPhase.USUAL if task.phase is not TaskPhase.USUAL else None
    return DispatchPlan(None, state, status, phase)


def _fit(
    planned: Dispatch, queue: str, task_type: TaskType, capacities: Sequence[sizing.WorkerCapacity]
) -> str | None:
    res = planned.spec.resources
    job = sizing.JobShape(
        planned.spec.kind,
        queue,
        res.memory_base_gb,
        res.memory_per_worker_gb,
        res.gpus,
        task_type.uses_cores,
        res.scratch_gb,
    )
    return sizing.fit_problem(job, capacities)


@dataclass
class Dispatcher:
    """The dispatch step over the controller's stores and queue."""

    store: RunStore
    resources: ResourceStore
    queue: JobQueue
    types: Mapping[str, TaskType]
    settings: ControllerSettings
    cache: ResolveCache = field(default_factory=ResolveCache)
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
            pending = await self.store.pending_counts(run.id) if tasks else {}
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
        return await self.cache.get(
            ResolveKey(key.text(), task_type.name, json.dumps(override, sort_keys=True), size),
            lambda: self.resources.resolve(
                key, task_type.hint, ResourceOverride(**override) if override else None, size
            ),
        )

    async def input_size(self, task: TaskRow) -> int | None:
        """The size of a task's inputs, measured once in a thread."""
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
        task_type = self.types.get(task.type)
        if task_type is None:
            return False  # _start failed the task; a restarted service may have lost a plugin
        resolved = await self.resolve(run, task, task_type)
        queue = sizing.queue_name(run.task_image(task_type.image), resolved.gpus)
        room = self.settings.window_jobs - in_flight.get(queue, 0)
        if room <= 0:
            return False
        merge = pending.get("merge", 0) > 0
        todo = pending.get("chunk", 0)
        chunks: list[Chunk]
        if merge or not task.splittable:
            rows = await self._pending(task, 1, "merge" if merge else "command")
            probe, chunks = 0, [tuple(rows)] if rows else []
        else:
            processes = sum(c.processes for c in capacities if queue in c.queues)
            probe, chunks = await self._chunks(task, resolved, todo, processes, room)
        if not chunks:
            return False  # nothing due, or the probe is out: the rest waits for its report
        timeout_s = (task.retry or {}).get("timeout_s") or self.settings.unit_timeout_s
        planned = build_jobs(
            self.settings.store,
            task,
            task_type,
            resolved,
            queue,
            chunks,
            timeout_s,
            run_image=run.image,
        )
        problem = next(filter(None, (_fit(d, queue, task_type, capacities) for d in planned)), None)
        plan = plan_dispatch(task, problem, merge, probe, todo, sum(len(c) for c in chunks))
        if plan is None:
            return False
        if plan.blocked is not None:
            await self.store.set_task(
                run.id, task.name, state="blocked", status=plan.blocked, now_s=self.clock.now()
            )
            log.warning("run %s task %s blocked: %s", run.id, task.name, plan.blocked)
            return True
        await self._send(task, queue, resolved, planned, plan, in_flight)
        return True

    async def _pending(self, task: TaskRow, limit: int, kind: UnitKind) -> list[UnitRow]:
        return await self.store.pending_rows(
            task.run, task.name, limit, kind=kind, now_s=self.clock.now()
        )

    async def _chunks(
        self, task: TaskRow, resolved: ResolvedResources, todo: int, processes: int, room: int
    ) -> tuple[int, list[Chunk]]:
        """The probe's units and the chunks to send now: units sent back, then fresh ones."""
        probe_out = task.phase is TaskPhase.PROBING and any(
            j.task == task.name for j in await self.store.jobs(task.run)
        )
        probe = probe_now(self.settings.probe, task, todo, processes, resolved, probe_out)
        if probe < 0:
            return probe, []
        size, limit = chunk_limit(self.settings, resolved, todo, processes, room, probe)
        units = await self._pending(task, limit, "chunk")
        chunks = cut_chunks(units, resolved.memory_per_worker_gb, size, room, todo, processes)
        if len(chunks) < room and len(units) < limit:
            fresh = await self.store.fresh_units(task.run, task.name)
            chunks += fresh_chunks(fresh, limit - len(units), size, room - len(chunks), processes)
        return probe, chunks

    async def _send(
        self,
        task: TaskRow,
        queue: str,
        resolved: ResolvedResources,
        planned: Sequence[Dispatch],
        plan: DispatchPlan,
        in_flight: dict[str, int],
    ) -> None:
        """Store the jobs and the task's plan in one transaction, then enqueue the jobs."""
        run_id, now = task.run, self.clock.now()
        if plan.phase is TaskPhase.PROBING:
            log.info("run %s task %s: %s", run_id, task.name, plan.status)
        async with self.store.transaction() as conn:
            await self.store.add_jobs([d.job for d in planned], now, conn=conn)
            await self.store.set_task(
                run_id,
                task.name,
                state=plan.state,
                status=plan.status,
                phase=plan.phase,
                queue=queue,
                resources={**asdict(resolved), "input_bytes": await self.input_size(task)},
                now_s=now,
                conn=conn,
            )
        in_flight[queue] = in_flight.get(queue, 0) + len(planned)
        # A fresh job's units were never dispatched before: no attempt to record.
        attempts = {k: d.job.attempt for d in planned if d.job.attempt > 1 for k in d.spec.units}
        await set_current_attempts(self.queue.redis, self.queue.keys, run_id, task.name, attempts)
        results = await self.queue.enqueue_many(
            [d.spec for d in planned], concurrency=self.settings.enqueue_concurrency
        )
        refused = [d.job.id for d, ok in zip(planned, results, strict=True) if not ok]
        if refused:
            # The id is taken (a result of that attempt still lives): go again with a new one.
            await self.store.release_jobs(refused, "the job id was taken in Redis")
            log.warning("run %s task %s: %d job ids were taken", run_id, task.name, len(refused))
