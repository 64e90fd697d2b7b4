"""The read side of the service: what the HTTP API and the metrics ask of the run store,
the learned resources and Redis, never waiting for the controller's lock."""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError, ResponseError

from simrun.core import sizing
from simrun.core.clock import SYSTEM_CLOCK, Clock
from simrun.core.eta import ETA_RULES, EtaRules, ObservedRate, RunProgress
from simrun.core.reports import WorkerInfo
from simrun.core.scaling import (
    DEFAULT_SHAPE,
    BacklogEntry,
    ContainerShape,
    QueueBacklog,
    ScalePolicy,
)
from simrun.core.states import ACTIVE_TASK_STATES, UNFINISHED_UNIT_STATES, TaskCounts
from simrun.core.views import FailureView, RunView
from simrun.plugins import ResourceHint, TaskType
from simrun.queues.client import JobQueue, dead_letter_counts
from simrun.resources import ResourceKey, ResourceStore, resource_key
from simrun.resources.store import KeyEvidence, KeySummary
from simrun.runstore.rows import RunRow
from simrun.runstore.store import RunStore
from simrun.service.dispatch import Dispatcher
from simrun.service.metrics import (
    METRICS_POLICY,
    Metrics,
    ReportLag,
    UnitTotals,
    pools_of,
    queue_metrics,
)
from simrun.service.settings import ControllerSettings
from simrun.service.views import failure_view, run_view

#: Runs whose progress is sampled at most (the least recently viewed are forgotten first).
MAX_SAMPLED_RUNS = 256


@dataclass(frozen=True)
class Backlog:
    """The work of the running runs: per queue the units not done by resource key, the unit
    totals, and how many runs run."""

    queues: dict[str, QueueBacklog]
    units: dict[str, UnitTotals]
    running_runs: int


def _field(info: Mapping[Any, Any], name: str) -> Any:
    value = info.get(name, info.get(name.encode()))
    return value.decode() if isinstance(value, bytes) else value


class ProgressSamples:
    """The progress samples of the running runs (`simrun.core.eta.RunProgress`) behind the
    observed rates of the ETAs, taken each time a run's view is computed, in memory only;
    at most ``max_runs`` running runs are kept."""

    def __init__(
        self, clock: Clock, rules: EtaRules = ETA_RULES, max_runs: int = MAX_SAMPLED_RUNS
    ) -> None:
        self.clock, self.rules, self.max_runs = clock, rules, max_runs
        self._runs: OrderedDict[str, RunProgress] = OrderedDict()

    def __len__(self) -> int:
        return len(self._runs)

    def observe(
        self,
        run_id: str,
        running: bool,
        counts: Mapping[str, TaskCounts],
        reused: Mapping[str, int] | None = None,
    ) -> dict[str, ObservedRate]:
        """Sample a run's tasks now; their observed rates (none once the run ended). Units
        reused from an earlier run (``reused``: task → how many) count for no rate."""
        if not running:
            self._runs.pop(run_id, None)
            return {}
        progress = self._runs.pop(run_id, None) or RunProgress(self.rules)
        self._runs[run_id] = progress
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)
        reused = reused or {}
        finished = {
            name: max(0, c.done + c.failed - reused.get(name, 0)) for name, c in counts.items()
        }
        return progress.observe(self.clock.monotonic(), finished)


class RunQueries:
    """Queries over the controller's stores and queue; ``clock`` times the ETAs' samples."""

    def __init__(
        self,
        store: RunStore,
        resources: ResourceStore,
        queue: JobQueue,
        types: Mapping[str, TaskType],
        settings: ControllerSettings,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store, self.resources, self.queue = store, resources, queue
        self.types, self.settings = types, settings
        self.progress = ProgressSamples(clock)

    async def exists(self, run_id: str) -> bool:
        """Whether the store knows the run."""
        return await self.store.run(run_id) is not None

    async def runs(self, limit: int = 100) -> list[RunRow]:
        """The latest runs first."""
        return await self.store.runs(limit=limit)

    async def run(self, run_id: str) -> RunView | None:
        """One run with per-task unit counts by state and ETAs (observed rates blended with
        the learned speed over the live workers' processes); None when unknown."""
        row = await self.store.run(run_id)
        if row is None:
            return None
        processes: dict[str, int] = defaultdict(int)
        try:
            workers = await self.queue.live_workers()
        except (RedisError, OSError):
            workers = []  # Redis away: the run is read from SQLite all the same
        for w in workers:
            for name in w.queues:
                processes[name] += w.processes
        counts = await self.store.counts(run_id)
        tasks = await self.store.tasks(run_id)
        reused = {t.name: t.units_reused for t in tasks if t.units_reused}
        observed = self.progress.observe(run_id, row.state == "running", counts, reused)
        return run_view(row, tasks, counts, processes, observed, held=row.id in self.store.held)

    async def failures(self, run_id: str) -> list[FailureView]:
        """The failed units of a run with their tracebacks."""
        return [failure_view(u) for u in await self.store.failures(run_id)]

    async def resources_by_key(self) -> list[KeySummary]:
        """What is learned per resource key."""
        return await self.resources.summaries({n: t.hint for n, t in self.types.items()})

    async def key_evidence(self, key: ResourceKey) -> KeyEvidence:
        """Why a task of ``key`` requests what it does, and the measurements behind it."""
        task_type = self.types.get(key.task_type)
        return await self.resources.evidence(
            key, task_type.hint if task_type is not None else ResourceHint()
        )

    async def live_workers(self) -> list[WorkerInfo]:
        """The worker containers whose heartbeat has not expired."""
        return await self.queue.live_workers()

    async def backlog(self) -> Backlog:
        """Per queue the backlog of the running runs (by resource key, with the resources
        a dispatch would use now: the dispatcher's own rule) and their unit totals."""
        resolver = Dispatcher(self.store, self.resources, self.queue, self.types, self.settings)
        work: dict[str, dict[tuple[str, float, float | None], int]] = defaultdict(
            lambda: defaultdict(int)
        )
        done: dict[str, int] = defaultdict(int)
        failed: dict[str, int] = defaultdict(int)
        killed: dict[str, int] = defaultdict(int)
        runs = await self.store.running_runs()
        for run in runs:
            counts = await self.store.counts(run.id)
            for task in await self.store.tasks(run.id):
                task_counts = counts.get(task.name, TaskCounts())
                task_type = self.types.get(task.type)
                queue = task.queue
                merge_left = 1 if task_counts.merge in UNFINISHED_UNIT_STATES else 0
                left = task_counts.unfinished + merge_left
                if task.state in ACTIVE_TASK_STATES and left > 0 and task_type is not None:
                    resolved = await resolver.resolve(run, task, task_type)
                    queue = sizing.queue_name(run.task_image(task_type.image), resolved.gpus)
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
        return Backlog(backlogs, totals, len(runs))

    async def report_lag(self) -> ReportLag:
        """The report stream's length, its entries not acknowledged by the controller's
        group, and the age of its oldest entry by the Redis server's clock."""
        redis, stream = self.queue.redis, self.queue.keys.reports
        async with redis.pipeline(transaction=False) as pipe:
            pipe.xlen(stream)
            pipe.xrange(stream, "-", "+", count=1)
            pipe.time()
            length, first, (seconds, micros) = await pipe.execute()
        pending = 0
        try:
            for info in await redis.xinfo_groups(stream):
                if _field(info, "name") == self.settings.group:
                    pending = int(_field(info, "pending") or 0)
        except ResponseError:
            pending = 0  # no stream yet (no worker reported and the controller never read)
        age = 0.0
        if first:
            raw_id = first[0][0]
            millis = int((raw_id.decode() if isinstance(raw_id, bytes) else raw_id).split("-")[0])
            age = max(0.0, (int(seconds) * 1000 + int(micros) / 1000 - millis) / 1000)
        return ReportLag(entries=int(length), pending=pending, oldest_age_s=age)

    async def metrics(
        self,
        *,
        default_shape: ContainerShape = DEFAULT_SHAPE,
        policy: ScalePolicy = METRICS_POLICY,
    ) -> Metrics:
        """The numbers of ``/metrics`` now, the store's even while Redis is away."""
        backlog = await self.backlog()
        redis_up = True
        workers: list[WorkerInfo] = []
        lag: ReportLag | None = None
        dead: dict[str, int] | None = None
        try:
            workers = await self.live_workers()
            lag = await self.report_lag()
            dead = await dead_letter_counts(self.queue.redis, self.queue.keys)
        except (RedisError, OSError):
            redis_up, workers, lag, dead = False, [], None, None
        return Metrics(
            queues=queue_metrics(
                backlog.queues,
                pools_of(workers),
                backlog.units,
                default_shape=default_shape,
                policy=policy,
            ),
            running_runs=backlog.running_runs,
            redis_up=redis_up,
            lag=lag,
            dead_letters=dead,
        )
