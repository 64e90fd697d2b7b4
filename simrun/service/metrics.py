"""What the service tells Prometheus (``GET /metrics``) and `simrun scale` (``GET
/backlog``): pure numbers per queue from one scrape's facts, rendered by `prometheus_client`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from simrun.core.reports import WorkerInfo
from simrun.core.scaling import (
    DEFAULT_SECONDS_PER_UNIT,
    DEFAULT_SHAPE,
    BacklogView,
    ContainerShape,
    QueueBacklog,
    QueueLoad,
    ScalePolicy,
    desired_containers,
)
from simrun.core.sizing import CPU
from simrun.queues.client import DeadLetterKind

#: The format `generate_latest` writes (the client's ``CONTENT_TYPE_LATEST`` may be newer).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The decision of ``simrun_desired_workers``: not clamped (the autoscaler's bounds apply).
METRICS_POLICY = ScalePolicy(min_containers=0, max_containers=1_000_000)


@dataclass(frozen=True)
class LiveWorkers:
    """The live worker containers of one queue, added up, and their most common shape."""

    workers: int = 0
    stopping: int = 0
    memory_gb: float = 0.0
    processes: int = 0
    gpus: int = 0
    free_memory_gb: float = 0.0
    free_processes: int = 0
    shape: ContainerShape | None = None


@dataclass(frozen=True)
class UnitTotals:
    """Units of the running runs' tasks of one queue: done, failed, and kills for memory."""

    done: int = 0
    failed: int = 0
    killed: int = 0


@dataclass(frozen=True)
class ReportLag:
    """The report stream's entries not ingested yet, those delivered, and the oldest's age."""

    entries: int
    pending: int
    oldest_age_s: float


@dataclass(frozen=True)
class QueueMetrics:
    """The numbers of one queue; ``shape`` decided ``desired`` (``shape_live``: not the
    default)."""

    queue: str
    backlog_units: int
    backlog_seconds: float
    desired: int
    shape: ContainerShape
    shape_live: bool
    pool: LiveWorkers = field(default_factory=LiveWorkers)
    units: UnitTotals = field(default_factory=UnitTotals)


@dataclass(frozen=True)
class Metrics:
    """Everything ``/metrics`` shows. ``lag`` and ``dead_letters`` (entries quarantined, by
    kind) are None when Redis did not answer."""

    queues: tuple[QueueMetrics, ...]
    running_runs: int = 0
    redis_up: bool = True
    lag: ReportLag | None = None
    dead_letters: Mapping[str, int] | None = None


def shape_of(workers: Sequence[WorkerInfo]) -> ContainerShape | None:
    """The most common shape of the ``workers`` not stopping (ties: the bigger one)."""
    shapes = Counter(
        (w.memory_gb, w.processes)
        for w in workers
        if not w.stopping and w.memory_gb > 0 and w.processes >= 1
    )
    if not shapes:
        return None
    (memory_gb, processes), _ = max(shapes.items(), key=lambda item: (item[1], item[0]))
    return ContainerShape(memory_gb=float(memory_gb), processes=int(processes))


def pools_of(workers: Sequence[WorkerInfo]) -> dict[str, LiveWorkers]:
    """The live workers per queue they serve."""
    by_queue: dict[str, list[WorkerInfo]] = defaultdict(list)
    for worker in workers:
        for queue in worker.queues:
            by_queue[queue].append(worker)
    return {
        queue: LiveWorkers(
            workers=len(group),
            stopping=sum(1 for w in group if w.stopping),
            memory_gb=sum(w.memory_gb for w in group),
            processes=sum(w.processes for w in group),
            gpus=sum(w.gpus for w in group),
            free_memory_gb=sum(w.free_memory_gb for w in group),
            free_processes=sum(w.free_processes for w in group),
            shape=shape_of(group),
        )
        for queue, group in sorted(by_queue.items())
    }


def queue_metrics(
    backlogs: Mapping[str, QueueBacklog],
    pools: Mapping[str, LiveWorkers],
    units: Mapping[str, UnitTotals],
    *,
    default_shape: ContainerShape = DEFAULT_SHAPE,
    policy: ScalePolicy = METRICS_POLICY,
) -> tuple[QueueMetrics, ...]:
    """The numbers of every queue with a backlog, workers or units (``cpu`` always)."""
    out = []
    for queue in sorted({CPU, *backlogs, *pools, *units}):
        backlog = backlogs.get(queue, QueueBacklog(queue))
        pool = pools.get(queue, LiveWorkers())
        shape = pool.shape or default_shape
        decision = desired_containers(backlog, shape, policy)
        out.append(
            QueueMetrics(
                queue=queue,
                backlog_units=backlog.units,
                backlog_seconds=backlog.seconds(policy.default_seconds_per_unit),
                desired=decision.desired,
                shape=shape,
                shape_live=pool.shape is not None,
                pool=pool,
                units=units.get(queue, UnitTotals()),
            )
        )
    return tuple(out)


def backlog_document(
    backlogs: Mapping[str, QueueBacklog],
    pools: Mapping[str, LiveWorkers],
    default_shape: ContainerShape = DEFAULT_SHAPE,
) -> dict[str, Any]:
    """The JSON of ``GET /backlog`` (`BacklogView`)."""
    queues = []
    for queue in sorted({CPU, *backlogs, *pools}):
        backlog = backlogs.get(queue, QueueBacklog(queue))
        pool = pools.get(queue, LiveWorkers())
        queues.append(QueueLoad(queue, backlog.units, backlog.entries, pool.workers, pool.shape))
    return BacklogView(tuple(queues), default_shape).to_dict()


#: The gauges of ``/metrics`` with one sample per queue: name, help, value.
QUEUE_GAUGES: tuple[tuple[str, str, Callable[[QueueMetrics], float]], ...] = (
    ("simrun_backlog_units",
     "Units not done yet (pending, queued, running) of the started tasks of running runs.",
     lambda q: q.backlog_units),
    ("simrun_backlog_seconds",
     "Queued work in process-seconds: units times learned seconds per unit "
     f"({DEFAULT_SECONDS_PER_UNIT:g} s for keys that learned none).",
     lambda q: q.backlog_seconds),
    ("simrun_desired_workers",
     "Worker containers that drain the backlog in the target time, packed by learned "
     "memory, with the live workers' shape (or the default); not clamped.",
     lambda q: q.desired),
    ("simrun_desired_workers_processes",
     "Processes per container the desired workers were decided with.",
     lambda q: q.shape.processes),
    ("simrun_desired_workers_memory_gib",
     "Memory per container (GiB) the desired workers were decided with.",
     lambda q: q.shape.memory_gb),
    ("simrun_workers", "Live worker containers serving the queue (heartbeat not expired).",
     lambda q: q.pool.workers),
    ("simrun_workers_stopping",
     "Live worker containers that are stopping (handing their units back).",
     lambda q: q.pool.stopping),
    ("simrun_worker_memory_gib", "Memory (GiB) of the live workers serving the queue.",
     lambda q: q.pool.memory_gb),
    ("simrun_worker_free_memory_gib",
     "Memory (GiB) not held by running units on the live workers of the queue.",
     lambda q: q.pool.free_memory_gb),
    ("simrun_worker_processes", "Process slots of the live workers serving the queue.",
     lambda q: q.pool.processes),
    ("simrun_worker_free_processes",
     "Process slots not running a unit on the live workers of the queue.",
     lambda q: q.pool.free_processes),
    ("simrun_worker_gpus", "GPUs of the live workers serving the queue.",
     lambda q: q.pool.gpus),
    ("simrun_units_done",
     "Done units of the running runs (a gauge: the store keeps states, not events).",
     lambda q: q.units.done),
    ("simrun_units_failed", "Failed units of the running runs (a replay puts them back: a gauge).",
     lambda q: q.units.failed),
    ("simrun_units_killed_for_memory",
     "Kills for memory of units of the running runs' tasks, each kill counted, since "
     "each task started (a replay does not reset them).",
     lambda q: q.units.killed),
)  # fmt: skip
#: The gauges of the service as a whole (None: not shown; the report stream's without Redis).
SERVICE_GAUGES: tuple[tuple[str, str, Callable[[Metrics], float | None]], ...] = (
    ("simrun_running_runs", "Runs in state running.", lambda m: m.running_runs),
    ("simrun_redis_up",
     "1 when Redis answered this scrape, else 0 (workers and lag then unknown).",
     lambda m: 1 if m.redis_up else 0),
    ("simrun_report_stream_entries",
     "Worker reports in the stream not ingested by the controller yet.",
     lambda m: m.lag.entries if m.lag else None),
    ("simrun_report_stream_pending",
     "Worker reports delivered to the controller but not acknowledged yet.",
     lambda m: m.lag.pending if m.lag else None),
    ("simrun_report_oldest_age_seconds",
     "Age of the oldest report not ingested yet (0 when none), Redis clock.",
     lambda m: m.lag.oldest_age_s if m.lag else None),
)  # fmt: skip


#: The kinds of entries quarantined, each shown (0 when none was).
DEAD_LETTER_KINDS: tuple[str, ...] = get_args(DeadLetterKind)


def dead_letter_samples(m: Metrics) -> dict[str, float] | None:
    """The dead letters by kind, every known kind shown (0 when none was)."""
    if m.dead_letters is None:
        return None
    return {k: m.dead_letters.get(k, 0) for k in sorted({*DEAD_LETTER_KINDS, *m.dead_letters})}


#: The samples of a gauge by the value of its one label (None: not shown).
Samples = Callable[[Metrics], Mapping[str, float] | None]
#: The gauges with one sample per value of a label: name, help, label, samples.
LABELED_GAUGES: tuple[tuple[str, str, str, Samples], ...] = (
    ("simrun_dead_letters",
     "Entries of Redis that could not be read and were moved to the dead-letter stream, by "
     "kind (report, heartbeat, job, attempts), since the namespace began (a count).",
     "kind", dead_letter_samples),
)  # fmt: skip


class Scrape(Collector):
    """One scrape's `Metrics` as `prometheus_client` metric families: `QUEUE_GAUGES`,
    `SERVICE_GAUGES`, then `LABELED_GAUGES`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        for name, text, of_queue in QUEUE_GAUGES:
            family = GaugeMetricFamily(name, text, labels=["queue"])
            for q in m.queues:
                family.add_metric([q.queue], of_queue(q))
            yield family
        for name, text, of_service in SERVICE_GAUGES:
            if (value := of_service(m)) is not None:
                yield GaugeMetricFamily(name, text, value)
        for name, text, label, samples in LABELED_GAUGES:
            if (values := samples(m)) is not None:
                family = GaugeMetricFamily(name, text, labels=[label])
                for key, value in values.items():
                    family.add_metric([key], value)
                yield family


def render(metrics: Metrics) -> str:
    """``metrics`` in the text exposition format 0.0.4."""
    return generate_latest(Scrape(metrics)).decode("utf-8")
