"""The dry-run forecast: what a run would cost on a pool of workers, before anything is
enqueued.

Everything here is pure (no I/O, no clock): the caller counts the units, resolves the
resources and describes the pool; `forecast` answers per task how many processes can run
its units at once, the core-hours, the memory in use at the peak and the time it takes,
and the totals of the run. The ETAs follow `simrun.core.eta`, the rule of a running run's
ETA (`GET /runs/RUN`) with nothing observed yet: a task's is the learned one, the run's
the longest chain of tasks along the graph (a task starts when its inputs are done), at
least each queue's tasks one after the other. Its peak memory is the largest of its
tasks' (taken to run one after the other).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from simrun.core.eta import TaskEta, learned_eta_s, run_eta_s
from simrun.core.sizing import WorkerCapacity, fit_problem, parallel_slots, request_gb
from simrun.plugins import ResourceHint
from simrun.resources import ResolvedResources
from simrun.workflow import ResourceOverride


@dataclass(frozen=True)
class TaskPlan:
    """A task as it would be dispatched: its units (None when they cannot be counted
    here), its queue, its resolved resources and the tasks it reads from."""

    name: str
    type: str
    kind: Literal["chunk", "command"]
    units: int | None
    queue: str
    memory_base_gb: float
    memory_per_worker_gb: float
    gpus: int
    seconds_per_unit: float | None
    source: str
    uses_cores: bool = False
    depends: tuple[str, ...] = ()
    #: The local scratch it asks of a worker (GiB).
    scratch_gb: float = 0.0


@dataclass(frozen=True)
class TaskForecast:
    """What one task would take on the pool. ``slots`` are the worker processes that can
    run its units at once; ``problem`` says why the pool cannot run it at all."""

    plan: TaskPlan
    slots: int
    core_hours: float | None
    peak_memory_gb: float | None
    eta_s: float | None
    problem: str | None


@dataclass(frozen=True)
class Forecast:
    """The tasks' forecasts and the run's totals (None where a task's is unknown)."""

    tasks: tuple[TaskForecast, ...]
    core_hours: float | None
    peak_memory_gb: float | None
    eta_s: float | None


def pool_text(workers: int, processes: int, memory_gb: float) -> str:
    """``2 worker containers x 4 processes, 16 GiB each``."""
    many = "s" if workers != 1 else ""
    memory = f"{memory_gb:.3g} GiB" if memory_gb >= 1 else f"{round(memory_gb * 1024)} MiB"
    return f"{workers} worker container{many} x {processes} processes, {memory} each"


#: GPUs taken for a live gpu worker: ``/backlog`` does not tell them, so they do not bound
#: the forecast.
UNTOLD_GPUS = 1_000_000


def live_pool(backlog: Mapping[str, Any]) -> tuple[WorkerCapacity, ...]:
    """The live workers a service's ``GET /backlog`` tells of: per queue, its count of the
    queue's most common container shape (a gpu worker's GPUs are not told, so they do not
    bound the forecast)."""
    pool: list[WorkerCapacity] = []
    for entry in backlog.get("queues") or ():
        shape = entry.get("shape")
        count = int(entry.get("workers") or 0)
        if not shape or count <= 0:
            continue
        queue = str(entry["queue"])
        gpus = UNTOLD_GPUS if queue == "gpu" else 0
        pool += [
            WorkerCapacity(
                f"{queue}-{i + 1}",
                (queue,),
                float(shape["memory_gb"]),
                int(shape["processes"]),
                gpus,
            )
            for i in range(count)
        ]
    return tuple(pool)


def pool_of(
    workers: int,
    processes: int,
    memory_gb: float,
    gpus: int = 0,
    queues: Sequence[str] = ("cpu", "gpu"),
    scratch_gb: float | None = None,
) -> tuple[WorkerCapacity, ...]:
    """A pool of ``workers`` identical worker containers (``scratch_gb``: the room of each
    one's local scratch, None when not known)."""
    return tuple(
        WorkerCapacity(f"worker-{i + 1}", tuple(queues), memory_gb, processes, gpus, scratch_gb)
        for i in range(workers)
    )


def slots_for(plan: TaskPlan, pool: Sequence[WorkerCapacity]) -> int:
    """How many units of ``plan`` the pool runs at once (`simrun.core.sizing.parallel_slots`)."""
    return parallel_slots(
        plan.kind,
        plan.queue,
        plan.memory_base_gb,
        plan.memory_per_worker_gb,
        plan.gpus,
        plan.uses_cores,
        pool,
    )


def pool_advice(problem: str) -> str:
    """What to do about a task the embedded pool cannot run, for its ``problem``
    (`fit_problem`'s sentence)."""
    if "local scratch" in problem:
        return (
            "give the workers a bigger disk for their scratch (SIMRUN_SCRATCH_DIR), or lower "
            "the task's scratch_gb in the workflow (resources: {scratch_gb: ...})"
        )
    return (
        "give the worker containers more memory (--worker-memory-gb), or lower the "
        "task's resources in the workflow"
    )


def _problem(plan: TaskPlan, pool: Sequence[WorkerCapacity]) -> str | None:
    if not any(plan.queue in w.queues for w in pool):
        return f"no worker of the pool serves the {plan.queue} queue"
    return fit_problem(
        plan.kind,
        plan.queue,
        plan.memory_base_gb,
        plan.memory_per_worker_gb,
        plan.gpus,
        plan.uses_cores,
        pool,
        scratch_gb=plan.scratch_gb,
    )


def forecast_task(plan: TaskPlan, pool: Sequence[WorkerCapacity]) -> TaskForecast:
    """The forecast of one task on ``pool``.

    A splittable task runs its units in waves of ``slots``: ETA = ceil(units / slots) *
    seconds per unit (`simrun.core.eta.learned_eta_s`, the ETA's rule before anything is
    observed), core-hours = units * seconds per unit / 3600, peak memory = the
    memory per process * the processes busy at once (at least its base memory, which its
    merge needs). A command runs once: ETA = its seconds, on all the processes of the
    worker when it uses the cores.
    """
    problem = _problem(plan, pool)
    slots = 0 if problem is not None else slots_for(plan, pool)
    if problem is None and slots == 0:
        problem = f"no worker of the pool fits a process of {plan.memory_per_worker_gb:g} GiB"
    spu = plan.seconds_per_unit
    serving = [w for w in pool if plan.queue in w.queues]
    if plan.kind == "command":
        cores = max((w.processes for w in serving), default=1) if plan.uses_cores else 1
        core_hours = None if spu is None else spu * cores / 3600
        peak: float | None = request_gb(
            "command", plan.memory_base_gb, plan.memory_per_worker_gb, cores, plan.uses_cores
        )
        return TaskForecast(plan, slots, core_hours, peak, learned_eta_s(1, spu, slots), problem)
    units = plan.units
    core_hours = None if spu is None or units is None else units * spu / 3600
    busy = slots if units is None else min(units, slots)
    peak = max(plan.memory_per_worker_gb * busy, plan.memory_base_gb) if slots else None
    eta = None if units is None else learned_eta_s(units, spu, slots)
    return TaskForecast(plan, slots, core_hours, peak, eta, problem)


def forecast(plans: Sequence[TaskPlan], pool: Sequence[WorkerCapacity]) -> Forecast:
    """The forecast of a run whose tasks are ``plans`` (in the order they run) on ``pool``:
    the run's ETA by `simrun.core.eta.run_eta_s`."""
    tasks = tuple(forecast_task(p, pool) for p in plans)
    hours = [t.core_hours for t in tasks]
    peaks = [t.peak_memory_gb for t in tasks if t.peak_memory_gb is not None]
    return Forecast(
        tasks=tasks,
        core_hours=None if any(h is None for h in hours) else sum(h or 0.0 for h in hours),
        peak_memory_gb=max(peaks) if peaks else None,
        eta_s=run_eta_s(
            [TaskEta(t.plan.name, t.plan.depends, t.plan.queue, False, t.eta_s) for t in tasks]
        ),
    )


def resolved_from_summary(
    summary: Mapping[str, Any] | None, hint: ResourceHint, override: ResourceOverride | None
) -> ResolvedResources:
    """The resources a service would resolve for a task, from its ``/resources`` row for
    the task's key (None when nothing is learned for it): the learned memory per process
    and seconds per unit, the hint's base memory, scratch and GPUs, each field the
    workflow's override sets winning."""
    fixed = override or ResourceOverride()
    per_worker = hint.memory_per_worker_gb
    source = "default" if hint == ResourceHint() else "plugin hint"
    spu: float | None = None
    samples = 0
    if summary is not None:
        per_worker = float(summary.get("requested_gb") or per_worker)
        source = str(summary.get("source") or source)
        raw = summary.get("seconds_per_unit")
        spu = None if raw is None else float(raw)
        samples = int(summary.get("samples") or 0)
    if fixed.memory_per_worker_gb is not None:
        per_worker, source, samples = fixed.memory_per_worker_gb, "override", 0
    return ResolvedResources(
        memory_base_gb=(
            hint.memory_base_gb if fixed.memory_base_gb is None else fixed.memory_base_gb
        ),
        memory_per_worker_gb=per_worker,
        scratch_gb=hint.scratch_gb if fixed.scratch_gb is None else fixed.scratch_gb,
        gpus=hint.gpus if fixed.gpus is None else fixed.gpus,
        seconds_per_unit=spu,
        samples=samples,
        source=source,
    )
