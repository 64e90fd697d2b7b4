"""Building the jobs of a task from its pending units (pure): the stored job and the payload
from one function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.layout import StoreLayout
from simrun.core.sizing import retry_memory_gb
from simrun.core.states import UnitKind, UnitRow
from simrun.plugins import TaskPaths, TaskType
from simrun.resources import RETRY_FACTOR, ResolvedResources
from simrun.runstore.rows import NewJob, TaskRow
from simrun.service.decisions import job_attempt


@dataclass(frozen=True)
class Dispatch:
    """A job ready to go: its record for the store and its payload for the queue."""

    job: NewJob
    spec: JobSpec


def task_paths(store: Path, task: TaskRow) -> TaskPaths:
    """Where a task of a run works (``STORE/runs/<run>/<task>/out``)."""
    inputs = {port: Path(p) for port, p in task.inputs.items()}
    return StoreLayout(store).task_paths(task.run, task.name, inputs=inputs)


def memory_groups(units: Sequence[UnitRow], resolved_gb: float) -> list[list[UnitRow]]:
    """Pending units grouped by the memory they need, smallest first, so that a unit killed
    before never raises the request of fresh ones."""
    groups: dict[float, list[UnitRow]] = {}
    for unit in units:
        groups.setdefault(_need_gb(resolved_gb, unit), []).append(unit)
    return [groups[need] for need in sorted(groups)]


def _need_gb(resolved_gb: float, unit: UnitRow) -> float:
    return retry_memory_gb(resolved_gb, unit.kills, unit.memory_gb, retry_factor=RETRY_FACTOR)


def build_jobs(
    store: Path,
    task: TaskRow,
    task_type: TaskType,
    resolved: ResolvedResources,
    queue: str,
    chunks: Sequence[Sequence[UnitRow] | range],
    timeout_s: float | None = None,
    run_image: str | None = None,
) -> list[Dispatch]:
    """One job per chunk of pending units of ``task`` (a `range`: fresh units), its attempt
    above its units', a unit killed for memory given `RETRY_FACTOR` times its last limit."""
    paths = JobPaths.of(task_paths(store, task))
    out: list[Dispatch] = []
    for units in chunks:
        if not units:
            raise ValueError(f"task {task.name!r}: an empty chunk cannot be a job")
        base_gb = resolved.memory_base_gb
        per_worker_gb = resolved.memory_per_worker_gb
        fresh = isinstance(units, range)
        indices: Sequence[int]
        if isinstance(units, range):  # fresh units were never killed: the resolved memory
            kind: UnitKind = "chunk"
            attempt = job_attempt(())
            indices = units
        else:
            kinds = {u.kind for u in units}
            if len(kinds) != 1:
                raise ValueError(f"task {task.name!r}: a job mixes units of kinds {sorted(kinds)}")
            kind = units[0].kind
            attempt = job_attempt(u.attempt for u in units)
            indices = tuple(u.index for u in units)
            if kind == "merge":
                base_gb = _need_gb(base_gb, units[0])
            else:
                per_worker_gb = max(_need_gb(per_worker_gb, u) for u in units)
        spec = JobSpec(
            kind=kind,
            run=task.run,
            task=task.name,
            task_type=task.type,
            settings=dict(task.settings),
            paths=paths,
            resources=JobResources(
                memory_base_gb=base_gb,
                memory_per_worker_gb=per_worker_gb,
                scratch_gb=resolved.scratch_gb,
                gpus=resolved.gpus,
                seconds_per_unit=resolved.seconds_per_unit,
            ),
            attempt=attempt,
            indices=tuple(indices) if kind == "chunk" else (),
            uses_cores=task_type.uses_cores,
            checkpoints=task_type.checkpoints,
            timeout_s=timeout_s,
            image=task_type.image if task_type.image is not None else run_image,
            staged=tuple(task.staged),
        )
        job = NewJob(
            id=spec.job_id,
            run=task.run,
            task=task.name,
            kind=kind,
            queue=queue,
            attempt=attempt,
            indices=indices,
            memory_gb=base_gb if kind == "merge" else per_worker_gb,
            fresh=fresh,
        )
        out.append(Dispatch(job, spec))
    return out
