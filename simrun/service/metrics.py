"""What the service tells Prometheus (``GET /metrics``) and `simrun scale` (``GET /backlog``).

Two halves: `simrun.service.queries.RunQueries` reads the facts (`RunQueries.metrics`: the
run store's read connection, the learned resources and Redis), and the learned resources
are resolved with the dispatcher's own rule (`Dispatcher.resolve`), so the backlog is what
a dispatch would ask for now. Plain functions here turn facts into numbers
(`queue_metrics`), and numbers into the text exposition format 0.0.4 (`render`): the
families are data (`QUEUE_FAMILIES`, `SERVICE_FAMILIES`: name, help and how the value is
computed), written by `prometheus_client` through a collector of one scrape's snapshot on
a private registry. So the rules are tested without a service.

The metrics, one series per queue (``queue="cpu"``, ``"gpu"``, ``"image:…"``; ``cpu`` is
always there, so a query for it never comes back empty):

* ``simrun_backlog_units``: units not done yet (pending, queued or running, merges
  included) of the started tasks of running runs. Tasks still waiting for their inputs have
  no units yet and are not counted.
* ``simrun_backlog_seconds``: that work in process-seconds: units times learned seconds per
  unit, `simrun.core.scaling.DEFAULT_SECONDS_PER_UNIT` for keys that learned none yet.
* ``simrun_desired_workers``: worker containers the backlog wants
  (`simrun.core.scaling.desired_containers`) with the shape of the queue's live workers (the most
  common one), or the service's default shape while none is live; drained in the default
  ten minutes, and not clamped here (``minReplicaCount``/``maxReplicaCount`` of the
  autoscaler, or ``--min/--max`` of `simrun scale`, do that).
* ``simrun_workers``, ``simrun_workers_stopping`` and the capacity of the live workers:
  ``simrun_worker_memory_gib``, ``simrun_worker_processes``, ``simrun_worker_gpus`` and
  their free parts (a worker that serves two queues counts in both).
* ``simrun_units_done``, ``simrun_units_failed``, ``simrun_units_killed_for_memory``:
  **gauges** over the runs still running, per queue of their tasks. Gauges and not
  counters because they follow the running runs: a run that ends leaves them, and a
  replay moves failed units back to pending. Over running runs only, and read from their
  task rows and the count index of their units, so a scrape never scans every unit ever
  run. ``killed_for_memory`` is the sum of the tasks' ``kills`` (`TaskRow.kills`): every
  kill for memory of a unit of the task is counted (a unit killed twice counts twice,
  merges and commands included), and a replay does not reset it, so it holds the kills
  since the task started, across replays.
* ``simrun_report_stream_entries``, ``simrun_report_stream_pending``,
  ``simrun_report_oldest_age_seconds``: the ingestion lag. The controller deletes a report
  once it applied it, so the stream's length is what is not ingested yet; ``pending`` is
  the part delivered to the controller but not acknowledged; the age is that of the
  oldest entry, by the Redis server's clock (0 when the stream is empty).
* ``simrun_running_runs``, and ``simrun_redis_up`` (0 when Redis did not answer: the
  numbers of the store are still given, the desired workers then with the default shape).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from simrun.core.reports import WorkerInfo
from simrun.core.scaling import (
    DEFAULT_SECONDS_PER_UNIT,
    DEFAULT_SHAPE,
    ContainerShape,
    QueueBacklog,
    ScalePolicy,
    desired_containers,
)

#: The media type of the text exposition format 0.0.4, which `generate_latest` writes (the
#: client's ``CONTENT_TYPE_LATEST`` names a newer version in recent releases).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The decision of ``simrun_desired_workers``: default drain time and unit time, no clamp
#: (the autoscaler's own minimum and maximum apply).
METRICS_POLICY = ScalePolicy(min_containers=0, max_containers=1_000_000)


# -- facts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveWorkers:
    """The live worker containers of one queue, added up; ``shape`` is the most common
    shape among those not stopping (None when every one is stopping)."""

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
    """Units of the running runs' tasks of one queue: done, failed; and ``killed``, the
    kills for memory of their units, each kill counted, since each task started (kept
    across replays)."""

    done: int = 0
    failed: int = 0
    killed: int = 0


@dataclass(frozen=True)
class ReportLag:
    """The report stream: entries not ingested yet, the part of them delivered but not
    acknowledged, and the age of the oldest in seconds (0 when empty)."""

    entries: int
    pending: int
    oldest_age_s: float


@dataclass(frozen=True)
class QueueMetrics:
    """The numbers of one queue. ``shape`` is what ``desired`` was decided with;
    ``shape_live`` says whether it is that of live workers or the default."""

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
    """Everything ``/metrics`` shows. ``lag`` is None when Redis did not answer."""

    queues: tuple[QueueMetrics, ...]
    running_runs: int = 0
    redis_up: bool = True
    lag: ReportLag | None = None


# -- the rules (pure) -----------------------------------------------------------------------


def shape_of(workers: Sequence[WorkerInfo]) -> ContainerShape | None:
    """The most common container shape among ``workers`` that are not stopping (ties: the
    bigger one); None when there is none."""
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


def backlog_seconds(backlog: QueueBacklog, default_seconds_per_unit: float) -> float:
    """The backlog's work in process-seconds; ``default_seconds_per_unit`` for keys that
    learned none."""
    return sum(
        e.units * (default_seconds_per_unit if e.seconds_per_unit is None else e.seconds_per_unit)
        for e in backlog.entries
    )


def queue_metrics(
    backlogs: Mapping[str, QueueBacklog],
    pools: Mapping[str, LiveWorkers],
    units: Mapping[str, UnitTotals],
    *,
    default_shape: ContainerShape = DEFAULT_SHAPE,
    policy: ScalePolicy = METRICS_POLICY,
) -> tuple[QueueMetrics, ...]:
    """The numbers of every queue that has a backlog, live workers or unit totals (and of
    ``cpu`` always), sorted by name."""
    out = []
    for queue in sorted({"cpu", *backlogs, *pools, *units}):
        backlog = backlogs.get(queue, QueueBacklog(queue))
        pool = pools.get(queue, LiveWorkers())
        shape = pool.shape or default_shape
        decision = desired_containers(backlog, shape, policy)
        out.append(
            QueueMetrics(
                queue=queue,
                backlog_units=backlog.units,
                backlog_seconds=backlog_seconds(backlog, policy.default_seconds_per_unit),
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
    """The JSON of ``GET /backlog``: per queue (``cpu`` always) its entries by resource key
    and the live workers' count and shape (None while none is live); and the service's
    default worker shape (``simrun service --worker-memory-gb/--worker-processes``), which
    `simrun scale` uses for a queue without live workers unless told otherwise."""
    queues = []
    for queue in sorted({"cpu", *backlogs, *pools}):
        backlog = backlogs.get(queue, QueueBacklog(queue))
        pool = pools.get(queue, LiveWorkers())
        shape = pool.shape
        queues.append(
            {
                "queue": queue,
                "units": backlog.units,
                "entries": [
                    {
                        "key": e.key,
                        "units": e.units,
                        "seconds_per_unit": e.seconds_per_unit,
                        "memory_per_worker_gb": e.memory_per_worker_gb,
                    }
                    for e in backlog.entries
                ],
                "workers": pool.workers,
                "shape": None
                if shape is None
                else {"memory_gb": shape.memory_gb, "processes": shape.processes},
            }
        )
    default = {"memory_gb": default_shape.memory_gb, "processes": default_shape.processes}
    return {"queues": queues, "default_shape": default}


@dataclass(frozen=True)
class Family:
    """One metric family as it is exposed: its name, type, help text and samples (labels,
    value)."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    samples: tuple[tuple[Mapping[str, str], float], ...] = ()


@dataclass(frozen=True)
class QueueFamily:
    """A gauge with one sample per queue (label ``queue``): its value from the queue's
    numbers."""

    name: str
    help: str
    value: Callable[[QueueMetrics], float]


@dataclass(frozen=True)
class ServiceFamily:
    """A gauge with one sample for the service: its value from the metrics, None when it is
    not known (the family is then left out)."""

    name: str
    help: str
    value: Callable[[Metrics], float | None]


#: The families of ``/metrics`` with one sample per queue (see the module's docstring).
QUEUE_FAMILIES: tuple[QueueFamily, ...] = (
    QueueFamily(
        "simrun_backlog_units",
        "Units not done yet (pending, queued, running) of the started tasks of running runs.",
        lambda q: q.backlog_units,
    ),
    QueueFamily(
        "simrun_backlog_seconds",
        "Queued work in process-seconds: units times learned seconds per unit "
        f"({DEFAULT_SECONDS_PER_UNIT:g} s for keys that learned none).",
        lambda q: q.backlog_seconds,
    ),
    QueueFamily(
        "simrun_desired_workers",
        "Worker containers that drain the backlog in the target time, packed by learned "
        "memory, with the live workers' shape (or the default); not clamped.",
        lambda q: q.desired,
    ),
    QueueFamily(
        "simrun_desired_workers_processes",
        "Processes per container the desired workers were decided with.",
        lambda q: q.shape.processes,
    ),
    QueueFamily(
        "simrun_desired_workers_memory_gib",
        "Memory per container (GiB) the desired workers were decided with.",
        lambda q: q.shape.memory_gb,
    ),
    QueueFamily(
        "simrun_workers",
        "Live worker containers serving the queue (heartbeat not expired).",
        lambda q: q.pool.workers,
    ),
    QueueFamily(
        "simrun_workers_stopping",
        "Live worker containers that are stopping (handing their units back).",
        lambda q: q.pool.stopping,
    ),
    QueueFamily(
        "simrun_worker_memory_gib",
        "Memory (GiB) of the live workers serving the queue.",
        lambda q: q.pool.memory_gb,
    ),
    QueueFamily(
        "simrun_worker_free_memory_gib",
        "Memory (GiB) not held by running units on the live workers of the queue.",
        lambda q: q.pool.free_memory_gb,
    ),
    QueueFamily(
        "simrun_worker_processes",
        "Process slots of the live workers serving the queue.",
        lambda q: q.pool.processes,
    ),
    QueueFamily(
        "simrun_worker_free_processes",
        "Process slots not running a unit on the live workers of the queue.",
        lambda q: q.pool.free_processes,
    ),
    QueueFamily(
        "simrun_worker_gpus",
        "GPUs of the live workers serving the queue.",
        lambda q: q.pool.gpus,
    ),
    QueueFamily(
        "simrun_units_done",
        "Done units of the running runs (a gauge: the store keeps states, not events).",
        lambda q: q.units.done,
    ),
    QueueFamily(
        "simrun_units_failed",
        "Failed units of the running runs (a replay puts them back: a gauge).",
        lambda q: q.units.failed,
    ),
    QueueFamily(
        "simrun_units_killed_for_memory",
        "Kills for memory of units of the running runs' tasks, each kill counted, since "
        "each task started (a replay does not reset them).",
        lambda q: q.units.killed,
    ),
)

#: The families of ``/metrics`` with one sample for the service; the report stream's are
#: left out when Redis did not answer.
SERVICE_FAMILIES: tuple[ServiceFamily, ...] = (
    ServiceFamily("simrun_running_runs", "Runs in state running.", lambda m: m.running_runs),
    ServiceFamily(
        "simrun_redis_up",
        "1 when Redis answered this scrape, else 0 (workers and lag then unknown).",
        lambda m: 1 if m.redis_up else 0,
    ),
    ServiceFamily(
        "simrun_report_stream_entries",
        "Worker reports in the stream not ingested by the controller yet.",
        lambda m: None if m.lag is None else m.lag.entries,
    ),
    ServiceFamily(
        "simrun_report_stream_pending",
        "Worker reports delivered to the controller but not acknowledged yet.",
        lambda m: None if m.lag is None else m.lag.pending,
    ),
    ServiceFamily(
        "simrun_report_oldest_age_seconds",
        "Age of the oldest report not ingested yet (0 when none), Redis clock.",
        lambda m: None if m.lag is None else m.lag.oldest_age_s,
    ),
)


def families(metrics: Metrics) -> list[Family]:
    """The metric families of ``metrics`` (see the module's docstring)."""
    out = [
        Family(
            f.name, "gauge", f.help, tuple(({"queue": q.queue}, f.value(q)) for q in metrics.queues)
        )
        for f in QUEUE_FAMILIES
    ]
    for family in SERVICE_FAMILIES:
        value = family.value(metrics)
        if value is not None:
            out.append(Family(family.name, "gauge", family.help, (({}, value),)))
    return out


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _check(metric_families: Sequence[Family]) -> None:
    """`ValueError` for a name the text format 0.0.4 does not allow, or a family given
    twice (the client accepts more since it learned UTF-8 names; a scrape in the classic
    format would not)."""
    seen: set[str] = set()
    for family in metric_families:
        if not _NAME.fullmatch(family.name):
            raise ValueError(f"bad metric name {family.name!r}")
        if family.name in seen:
            raise ValueError(f"metric {family.name!r} is given twice")
        seen.add(family.name)
        for labels, _ in family.samples:
            for label in labels:
                if not _LABEL.fullmatch(label) or label.startswith("__"):
                    raise ValueError(f"bad label name {label!r} of {family.name}")


class FamiliesCollector(Collector):
    """A `prometheus_client` collector of fixed families (one scrape's snapshot)."""

    def __init__(self, metric_families: Sequence[Family]) -> None:
        self.metric_families = metric_families

    def collect(self) -> Iterator[Metric]:
        for family in self.metric_families:
            labels = sorted({k for sample_labels, _ in family.samples for k in sample_labels})
            out: GaugeMetricFamily | CounterMetricFamily
            if family.kind == "counter":
                out = CounterMetricFamily(family.name, family.help, labels=labels)
            else:
                out = GaugeMetricFamily(family.name, family.help, labels=labels)
            for sample_labels, value in family.samples:
                out.add_metric([sample_labels.get(k, "") for k in labels], float(value))
            yield out


def render_families(metric_families: Sequence[Family]) -> str:
    """The text exposition format 0.0.4 of ``metric_families``, written by
    `prometheus_client` (a private registry holding one `FamiliesCollector`). `ValueError`
    for a bad name or a name given twice."""
    _check(metric_families)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(metric_families))
    return generate_latest(registry).decode("utf-8")


def render(metrics: Metrics) -> str:
    """``metrics`` in the text exposition format 0.0.4."""
    return render_families(families(metrics))
