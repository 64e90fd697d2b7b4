"""Reading the facts behind `simrun.service.metrics`: the run store's read connection, the
learned resources and Redis. Nothing here writes, but for `JobQueue.live_workers`
forgetting the ids of expired heartbeats (as every controller step and /health do)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError, ResponseError

from simrun.core.reports import WorkerInfo
from simrun.core.scaling import (
    DEFAULT_SHAPE,
    BacklogEntry,
    ContainerShape,
    QueueBacklog,
    ScalePolicy,
)
from simrun.core.states import TaskCounts
from simrun.queues import JobQueue
from simrun.resources import ResolvedResources, ResourceKey, resource_key
from simrun.service import decisions
from simrun.service.dispatch import Dispatcher
from simrun.service.metrics import (
    ACTIVE_TASK_STATES,
    METRICS_POLICY,
    UNFINISHED_STATES,
    Metrics,
    ReportLag,
    UnitTotals,
    pools_of,
    queue_metrics,
)

if TYPE_CHECKING:
    from simrun.service.controller import Controller

__all__ = ["gather", "gather_backlog", "report_lag"]


def _merge_units(counts: TaskCounts) -> int:
    return 1 if counts.merge in UNFINISHED_STATES else 0


async def gather_backlog(
    controller: Controller,
) -> tuple[dict[str, QueueBacklog], dict[str, UnitTotals], int]:
    """Per queue the backlog of the running runs (by resource key, with the resources a
    dispatch would use now) and their unit totals; and the number of running runs."""
    resolver = Dispatcher(
        store=controller.store,
        resources=controller.resources,
        queue=controller.queue,
        types=controller.types,
        settings=controller.settings,
        cache={},
    )
    work: dict[str, dict[tuple[str, float, float | None], int]] = defaultdict(
        lambda: defaultdict(int)
    )
    done: dict[str, int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    killed: dict[str, int] = defaultdict(int)
    runs = await controller.store.runs(limit=1_000_000, states=["running"])
    for run in runs:
        counts = await controller.store.counts(run.id)
        for task in await controller.store.tasks(run.id):
            task_counts = counts.get(task.name, TaskCounts())
            task_type = controller.types.get(task.type)
            resolved: ResolvedResources | None = None
            queue = task.queue
            left = task_counts.unfinished + _merge_units(task_counts)
            if task.state in ACTIVE_TASK_STATES and left > 0 and task_type is not None:
                resolved = await resolver.resolve(run, task, task_type)
                queue = decisions.queue_name(task_type.image, resolved.gpus)
                key = (
                    ResourceKey.from_text(task.resource_key)
                    if task.resource_key
                    else resource_key(task_type, task.settings, run.model)
                )
                slot = (key.text(), resolved.memory_per_worker_gb, resolved.seconds_per_unit)
                work[queue][slot] += left
            if queue is None:
                continue  # never dispatched: nothing done or failed yet
            done[queue] += task_counts.done + (1 if task_counts.merge == "done" else 0)
            failed[queue] += task_counts.failed + (1 if task_counts.merge == "failed" else 0)
            killed[queue] += task.kills  # kept on the task row: no scan of its units
    backlogs = {
        queue: QueueBacklog(
            queue,
            tuple(
                BacklogEntry(key, units, seconds, memory)
                for (key, memory, seconds), units in sorted(
                    slots.items(), key=lambda item: (item[0][0], item[0][1])
                )
            ),
        )
        for queue, slots in work.items()
    }
    totals = {
        q: UnitTotals(done=done[q], failed=failed[q], killed=killed[q])
        for q in sorted({*done, *failed, *killed})
    }
    return backlogs, totals, len(runs)


def _field(info: Mapping[Any, Any], name: str) -> Any:
    value = info.get(name, info.get(name.encode()))
    return value.decode() if isinstance(value, bytes) else value


async def report_lag(queue: JobQueue, group: str) -> ReportLag:
    """The report stream's length, the entries delivered to ``group`` but not acknowledged,
    and the age of its oldest entry by the Redis server's clock (reads only: XLEN, XRANGE
    of one entry, TIME, XINFO GROUPS)."""
    redis, stream = queue.redis, queue.keys.reports
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xlen(stream)
        pipe.xrange(stream, "-", "+", count=1)
        pipe.time()
        length, first, (seconds, micros) = await pipe.execute()
    pending = 0
    try:
        for info in await redis.xinfo_groups(stream):
            if _field(info, "name") == group:
                pending = int(_field(info, "pending") or 0)
    except ResponseError:
        pending = 0  # no stream yet (no worker reported and the controller never read)
    age = 0.0
    if first:
        raw_id = first[0][0]
        millis = int((raw_id.decode() if isinstance(raw_id, bytes) else raw_id).split("-")[0])
        age = max(0.0, (int(seconds) * 1000 + int(micros) / 1000 - millis) / 1000)
    return ReportLag(entries=int(length), pending=pending, oldest_age_s=age)


async def gather(
    controller: Controller,
    *,
    default_shape: ContainerShape = DEFAULT_SHAPE,
    policy: ScalePolicy = METRICS_POLICY,
) -> Metrics:
    """The metrics now. The store's numbers are given even when Redis does not answer
    (``redis_up`` false, no workers, no lag)."""
    backlogs, units, running = await gather_backlog(controller)
    redis_up = True
    workers: list[WorkerInfo] = []
    lag: ReportLag | None = None
    try:
        workers = await controller.queue.live_workers()
        lag = await report_lag(controller.queue, controller.settings.group)
    except (RedisError, OSError):
        redis_up, workers, lag = False, [], None
    return Metrics(
        queues=queue_metrics(
            backlogs, pools_of(workers), units, default_shape=default_shape, policy=policy
        ),
        running_runs=running,
        redis_up=redis_up,
        lag=lag,
    )
