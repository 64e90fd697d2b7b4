"""How many worker containers a queue wants (`desired_containers`, pure), from its backlog
by resource key and its containers' shape; `simrun scale` and ``/metrics`` use it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import TypeAdapter

#: Seconds assumed for one unit of a key that has no learned ``seconds_per_unit`` yet.
DEFAULT_SECONDS_PER_UNIT = 60.0
#: How long the queued work should take to drain: ten minutes.
DEFAULT_TARGET_DRAIN_S = 600.0
#: Rounding slack: 2.000000001 containers are 2, not 3.
_EPS = 1e-9


def _finite(value: float, minimum: float, what: str, *, strict: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        sign = ">" if strict else ">="
        raise ValueError(f"{what} must be {sign} {minimum:g}, got {value!r}")


def _count(value: int, minimum: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class BacklogEntry:
    """The units of one resource key not done yet, the seconds one takes (None: not learned)
    and the memory of one worker process (GiB)."""

    key: str
    units: int
    seconds_per_unit: float | None
    memory_per_worker_gb: float

    def __post_init__(self) -> None:
        _count(self.units, 0, f"backlog of {self.key!r}: units")
        if self.seconds_per_unit is not None:
            _finite(self.seconds_per_unit, 0, f"backlog of {self.key!r}: seconds_per_unit")
        _finite(self.memory_per_worker_gb, 0, f"backlog of {self.key!r}: memory_per_worker_gb")


@dataclass(frozen=True)
class QueueBacklog:
    """The backlog of one queue (cpu, gpu, image:…), one entry per resource key."""

    queue: str
    entries: tuple[BacklogEntry, ...] = ()

    @property
    def units(self) -> int:
        return sum(e.units for e in self.entries)

    def seconds(self, default_seconds_per_unit: float) -> float:
        """The backlog's work in process-seconds (the default for keys that learned none)."""
        return sum(
            e.units
            * (default_seconds_per_unit if e.seconds_per_unit is None else e.seconds_per_unit)
            for e in self.entries
        )


@dataclass(frozen=True)
class ContainerShape:
    """What one worker container of the queue has: memory (GiB) and process slots."""

    memory_gb: float
    processes: int

    def __post_init__(self) -> None:
        _finite(self.memory_gb, 0, "container memory_gb", strict=True)
        _count(self.processes, 1, "container processes")


@dataclass(frozen=True)
class QueueLoad:
    """One queue of ``GET /backlog``: its backlog, and its live workers' count and most
    common shape."""

    queue: str
    units: int
    entries: tuple[BacklogEntry, ...]
    workers: int
    shape: ContainerShape | None

    @property
    def backlog(self) -> QueueBacklog:
        return QueueBacklog(self.queue, self.entries)


@dataclass(frozen=True)
class BacklogView:
    """The answer of ``GET /backlog``: every queue (cpu always) and the default worker
    shape, for a queue without live workers."""

    queues: tuple[QueueLoad, ...]
    default_shape: ContainerShape

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_BACKLOG = TypeAdapter(BacklogView)


def parse_backlog(data: Any) -> BacklogView:
    """A ``GET /backlog`` answer from its JSON; `ValueError` names what does not fit."""
    return _BACKLOG.validate_python(data)


#: The container assumed while none of a queue is live (deploy/kubernetes/worker-cpu.yaml).
DEFAULT_SHAPE = ContainerShape(memory_gb=8.0, processes=4)


@dataclass(frozen=True)
class ScalePolicy:
    """The knobs of the decision: drain target, default unit time, and the clamp."""

    target_drain_s: float = DEFAULT_TARGET_DRAIN_S
    default_seconds_per_unit: float = DEFAULT_SECONDS_PER_UNIT
    min_containers: int = 0
    max_containers: int = 10

    def __post_init__(self) -> None:
        _finite(self.target_drain_s, 0, "target drain seconds", strict=True)
        _finite(self.default_seconds_per_unit, 0, "default seconds per unit", strict=True)
        _count(self.min_containers, 0, "min_containers")
        _count(self.max_containers, 0, "max_containers")
        if self.min_containers > self.max_containers:
            raise ValueError(
                f"min_containers ({self.min_containers}) is more than "
                f"max_containers ({self.max_containers})"
            )


@dataclass(frozen=True)
class ScaleDecision:
    """How many containers the queue wants (clamped), and why: the demand by time, memory
    and parallelism, the work in process-seconds, and the keys no process fits."""

    queue: str
    desired: int
    reason: str
    demand: int = 0
    by_time: int = 0
    by_memory: int = 0
    by_parallelism: int = 0
    work_s: float = 0.0
    units: int = 0
    unfit: tuple[str, ...] = field(default=())


def slots_per_container(memory_per_worker_gb: float, shape: ContainerShape) -> int:
    """How many units of a key one container runs at once, within its memory (may be 0)."""
    if memory_per_worker_gb <= 0:
        return shape.processes
    fit = math.floor(shape.memory_gb / memory_per_worker_gb + _EPS)
    return max(0, min(shape.processes, fit))


def _ceil(value: float) -> int:
    return max(0, math.ceil(value - _EPS))


def work_duration(seconds: float) -> str:
    """Seconds of work for a decision's reason and table: ``90 s``, ``12.5 min``, ``3.1 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _clamp(demand: int, policy: ScalePolicy) -> tuple[int, str]:
    if demand < policy.min_containers:
        return policy.min_containers, f"raised to the minimum {policy.min_containers}"
    if demand > policy.max_containers:
        return policy.max_containers, f"capped at the maximum {policy.max_containers}"
    return demand, ""


def desired_containers(
    backlog: QueueBacklog, shape: ContainerShape, policy: ScalePolicy | None = None
) -> ScaleDecision:
    """The containers of ``shape`` that drain ``backlog`` within the policy's target time
    (each key ``units x seconds_per_unit / slots``, at most what its units keep busy)."""
    policy = policy or ScalePolicy()
    work_s = 0.0  # process-seconds of all units that can run here
    container_s_full = 0.0  # container-seconds if every process slot were usable
    container_s_fit = 0.0  # container-seconds with the slots memory leaves
    parallel = 0.0  # containers that would run every unit at once
    defaulted = 0
    units = 0
    unfit: list[str] = []
    tight: list[str] = []
    for entry in backlog.entries:
        if entry.units == 0:
            continue
        slots = slots_per_container(entry.memory_per_worker_gb, shape)
        if slots == 0:
            unfit.append(entry.key)
            continue
        seconds = entry.seconds_per_unit
        if seconds is None:
            seconds = policy.default_seconds_per_unit
            defaulted += entry.units
        units += entry.units
        work = entry.units * seconds
        work_s += work
        container_s_full += work / shape.processes
        container_s_fit += work / slots
        parallel += entry.units / slots
        if slots < shape.processes:
            tight.append(f"{entry.key!r} {slots} at a time ({entry.memory_per_worker_gb:g} GiB)")

    by_time = _ceil(container_s_full / policy.target_drain_s)
    by_memory = _ceil(container_s_fit / policy.target_drain_s)
    by_parallelism = _ceil(parallel)
    demand = min(by_memory, by_parallelism)
    desired, clamp_note = _clamp(demand, policy)

    parts: list[str] = []
    if units == 0 and not unfit:
        parts.append("empty backlog")
    elif units:
        default_s = work_duration(policy.default_seconds_per_unit)
        known = f" ({defaulted} at the default {default_s} per unit)" if defaulted else ""
        parts.append(
            f"{units} units, {work_duration(work_s)} of work{known}: "
            f"{by_time} container(s) of {shape.processes} "
            f"processes drain it in {work_duration(policy.target_drain_s)}"
        )
        if by_memory > by_time:
            parts.append(
                f"memory fit ({shape.memory_gb:g} GiB per container: "
                f"{'; '.join(tight)}) needs {by_memory}"
            )
        if by_parallelism < by_memory:
            parts.append(f"the units keep at most {by_parallelism} busy")
    if unfit:
        parts.append(
            f"{len(unfit)} key(s) cannot fit one process in {shape.memory_gb:g} GiB and are "
            f"left out: {', '.join(repr(k) for k in unfit)}"
        )
    if clamp_note:
        parts.append(clamp_note)
    reason = f"{backlog.queue}: {'; '.join(parts)} → {desired}"
    return ScaleDecision(
        queue=backlog.queue,
        desired=desired,
        reason=reason,
        demand=demand,
        by_time=by_time,
        by_memory=by_memory,
        by_parallelism=by_parallelism,
        work_s=work_s,
        units=units,
        unfit=tuple(unfit),
    )
