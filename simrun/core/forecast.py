"""The forecast of a run on a pool of workers (pure), for the dry run and the Editor: per
task its slots, core-hours, peak memory and ETA (`simrun.core.eta`), and the totals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from simrun.core.eta import TaskEta, learned_eta_s, run_eta_s
from simrun.core.scaling import BacklogView
from simrun.core.sizing import JobShape, WorkerCapacity, fit_problem, parallel_slots, request_gb


@dataclass(frozen=True)
class TaskPlan:
    """A task as it would be dispatched (``units`` None: not countable here)."""

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
    scratch_gb: float = 0.0


@dataclass(frozen=True)
class TaskForecast:
    """One task on the pool: the processes that run it at once, and why it cannot run."""

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


def live_pool(backlog: BacklogView) -> tuple[WorkerCapacity, ...]:
    """The live workers a ``GET /backlog`` tells of (per queue, its most common shape)."""
    pool: list[WorkerCapacity] = []
    for q in backlog.queues:
        if q.shape is None:
            continue
        gpus = UNTOLD_GPUS if q.queue == "gpu" else 0
        memory_gb, processes = q.shape.memory_gb, q.shape.processes
        pool += [
            WorkerCapacity(f"{q.queue}-{i + 1}", (q.queue,), memory_gb, processes, gpus)
            for i in range(q.workers)
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
    """A pool of ``workers`` identical worker containers."""
    return tuple(
        WorkerCapacity(f"worker-{i + 1}", tuple(queues), memory_gb, processes, gpus, scratch_gb)
        for i in range(workers)
    )


def _shape(plan: TaskPlan) -> JobShape:
    return JobShape(
        plan.kind,
        plan.queue,
        plan.memory_base_gb,
        plan.memory_per_worker_gb,
        plan.gpus,
        plan.uses_cores,
        plan.scratch_gb,
    )


def pool_advice(problem: str) -> str:
    """What to do about a task the embedded pool cannot run, for its ``problem``."""
    if "local scratch" in problem:
        return (
            "give the workers a bigger disk for their scratch (SIMRUN_SCRATCH_DIR), or lower "
            "the task's scratch_gb in the workflow (resources: {scratch_gb: ...})"
        )
    return (
        "give the worker containers more memory (--worker-memory-gb), or lower the "
        "task's resources in the workflow"
    )


def slots_for(plan: TaskPlan, pool: Sequence[WorkerCapacity]) -> int:
    """How many units of ``plan`` the pool runs at once."""
    return parallel_slots(_shape(plan), pool)


def _problem(plan: TaskPlan, pool: Sequence[WorkerCapacity], slots: int) -> str | None:
    if not any(plan.queue in w.queues for w in pool):
        return f"no worker of the pool serves the {plan.queue} queue"
    problem = fit_problem(_shape(plan), pool)
    if problem is None and slots == 0:
        return f"no worker of the pool fits a process of {plan.memory_per_worker_gb:g} GiB"
    return problem


def forecast_task(plan: TaskPlan, pool: Sequence[WorkerCapacity]) -> TaskForecast:
    """One task on ``pool``: units in waves of its slots, or a command once (on all the
    processes of its worker when it uses the cores)."""
    slots = slots_for(plan, pool)
    problem = _problem(plan, pool, slots)
    slots = 0 if problem is not None else slots
    spu = plan.seconds_per_unit
    if plan.kind == "command":
        serving = [w.processes for w in pool if plan.queue in w.queues]
        cores = max(serving, default=1) if plan.uses_cores else 1
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
    """A run whose tasks are ``plans`` on ``pool`` (its peak memory: the largest task's)."""
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


def forecast_document(result: Forecast, pool: Sequence[WorkerCapacity]) -> dict[str, Any]:
    """The forecast as the Editor's table reads it (JSON)."""
    tasks = [
        {
            "task": t.plan.name,
            "type": t.plan.type,
            "units": t.plan.units,
            "queue": t.plan.queue,
            "memory_per_worker_gb": t.plan.memory_per_worker_gb,
            "memory_source": t.plan.source,
            "seconds_per_unit": t.plan.seconds_per_unit,
            "core_hours": t.core_hours,
            "peak_memory_gb": t.peak_memory_gb,
            "slots": t.slots,
            "eta_s": t.eta_s,
            "problem": t.problem,
        }
        for t in result.tasks
    ]
    return {
        "tasks": tasks,
        "core_hours": result.core_hours,
        "peak_memory_gb": result.peak_memory_gb,
        "eta_s": result.eta_s,
        "pool": {
            "workers": len(pool),
            "processes": sum(w.processes for w in pool),
            "memory_gb": sum(w.memory_gb for w in pool),
        },
    }
