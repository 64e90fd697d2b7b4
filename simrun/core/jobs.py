"""The job payload (`JobSpec`): what the service sends a worker for one job."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from simrun.core.sizing import queue_name
from simrun.core.wire import JOB_KINDS, JobKind, PayloadError, UnitKey, job_id
from simrun.plugins import TaskPaths

__all__ = ["JobPaths", "JobResources", "JobSpec", "queue_for"]


def _field(data: Mapping[str, Any], name: str, where: str) -> Any:
    try:
        return data[name]
    except KeyError:
        raise PayloadError(f"{where}: the field {name!r} is missing") from None


def _str(data: Mapping[str, Any], name: str, where: str, *, optional: bool = False) -> Any:
    value = data.get(name) if optional else _field(data, name, where)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise PayloadError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    return value


def _number(data: Mapping[str, Any], name: str, where: str, *, default: Any = ...) -> Any:
    value = _field(data, name, where) if default is ... else data.get(name, default)
    if value is None and default is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise PayloadError(f"{where}: field {name!r} must be a finite number >= 0, got {value!r}")
    return float(value)


def _int(
    data: Mapping[str, Any], name: str, where: str, *, minimum: int, default: Any = ...
) -> int:
    value = _field(data, name, where) if default is ... else data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PayloadError(
            f"{where}: field {name!r} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def _bool(data: Mapping[str, Any], name: str, where: str) -> bool:
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise PayloadError(f"{where}: field {name!r} must be true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class JobResources:
    """The resolved resources a job runs under (see simrun.resources.ResolvedResources)."""

    memory_base_gb: float
    memory_per_worker_gb: float
    scratch_gb: float = 0.0
    gpus: int = 0
    seconds_per_unit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_base_gb": self.memory_base_gb,
            "memory_per_worker_gb": self.memory_per_worker_gb,
            "scratch_gb": self.scratch_gb,
            "gpus": self.gpus,
            "seconds_per_unit": self.seconds_per_unit,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "job payload: resources") -> JobResources:
        if not isinstance(data, Mapping):
            raise PayloadError(f"{where}: must be a map, got {type(data).__name__}")
        return cls(
            memory_base_gb=_number(data, "memory_base_gb", where),
            memory_per_worker_gb=_number(data, "memory_per_worker_gb", where),
            scratch_gb=_number(data, "scratch_gb", where, default=0.0),
            gpus=_int(data, "gpus", where, minimum=0, default=0),
            seconds_per_unit=_number(data, "seconds_per_unit", where, default=None),
        )


@dataclass(frozen=True)
class JobPaths:
    """`TaskPaths` as strings, for the wire."""

    store: str
    run_dir: str
    task_dir: str
    out: str
    inputs: dict[str, str]
    scratch: str

    @classmethod
    def of(cls, paths: TaskPaths) -> JobPaths:
        return cls(
            store=str(paths.store),
            run_dir=str(paths.run_dir),
            task_dir=str(paths.task_dir),
            out=str(paths.out),
            inputs={port: str(p) for port, p in sorted(paths.inputs.items())},
            scratch=str(paths.scratch),
        )

    def task_paths(self) -> TaskPaths:
        return TaskPaths(
            store=Path(self.store),
            run_dir=Path(self.run_dir),
            task_dir=Path(self.task_dir),
            out=Path(self.out),
            inputs={port: Path(p) for port, p in self.inputs.items()},
            scratch=Path(self.scratch),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "run_dir": self.run_dir,
            "task_dir": self.task_dir,
            "out": self.out,
            "inputs": dict(self.inputs),
            "scratch": self.scratch,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "job payload: paths") -> JobPaths:
        if not isinstance(data, Mapping):
            raise PayloadError(f"{where}: must be a map, got {type(data).__name__}")
        inputs = _field(data, "inputs", where)
        if not isinstance(inputs, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in inputs.items()
        ):
            raise PayloadError(f"{where}: field 'inputs' must map port names to paths")
        return cls(
            store=_str(data, "store", where),
            run_dir=_str(data, "run_dir", where),
            task_dir=_str(data, "task_dir", where),
            out=_str(data, "out", where),
            inputs=dict(inputs),
            scratch=_str(data, "scratch", where),
        )


@dataclass(frozen=True)
class JobSpec:
    """One job: a chunk of units, the merge, or the command of an unsplit task.

    ``indices`` are the units of a chunk (empty for merge and command). ``attempt`` counts
    from 1; the service raises it when it dispatches a unit again. ``timeout_s`` bounds
    one unit (and the setup of a process), None for no bound. ``command`` is the argv
    template of a command job. ``image`` routes the job to its image's queue.
    """

    kind: JobKind
    run: str
    task: str
    task_type: str
    settings: dict[str, Any]
    paths: JobPaths
    resources: JobResources
    attempt: int = 1
    indices: tuple[int, ...] = ()
    uses_cores: bool = False
    checkpoints: bool = False
    timeout_s: float | None = None
    command: str | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        where = f"job {self.run}:{self.task}"
        if self.kind not in JOB_KINDS:
            raise PayloadError(f"{where}: kind {self.kind!r} is not one of {JOB_KINDS}")
        if self.kind == "chunk" and not self.indices:
            raise PayloadError(f"{where}: a chunk job needs at least one unit index")
        if self.kind != "chunk" and self.indices:
            raise PayloadError(f"{where}: a {self.kind} job takes no unit indices")
        if len(set(self.indices)) != len(self.indices):
            raise PayloadError(f"{where}: field 'indices' names a unit twice")
        if self.kind == "command" and not self.command:
            raise PayloadError(f"{where}: a command job needs its command template")
        if self.attempt < 1:
            raise PayloadError(f"{where}: field 'attempt' must be >= 1, got {self.attempt}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise PayloadError(f"{where}: field 'timeout_s' must be > 0 or null")

    @property
    def job_id(self) -> str:
        """The deterministic id (see `job_id`)."""
        return job_id(self.run, self.task, self.kind, self.indices, self.attempt)

    @property
    def units(self) -> tuple[UnitKey, ...]:
        """What the job's report has outcomes for: the indices, or its kind."""
        return self.indices if self.kind == "chunk" else (self.kind,)

    def to_dict(self) -> dict[str, Any]:
        """The payload on the wire (msgpack): a map of

        ``job_id`` str (derived, checked on reading), ``kind`` "chunk"|"merge"|"command",
        ``run``, ``task``, ``task_type`` str, ``settings`` map, ``paths`` {store, run_dir,
        task_dir, out, scratch: str, inputs: {port: str}}, ``resources`` {memory_base_gb,
        memory_per_worker_gb, scratch_gb: float, gpus: int, seconds_per_unit: float|null},
        ``attempt`` int >= 1, ``indices`` [int], ``uses_cores``, ``checkpoints`` bool,
        ``timeout_s`` float|null, ``command`` str|null, ``image`` str|null.
        """
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "run": self.run,
            "task": self.task,
            "task_type": self.task_type,
            "settings": self.settings,
            "paths": self.paths.to_dict(),
            "resources": self.resources.to_dict(),
            "attempt": self.attempt,
            "indices": list(self.indices),
            "uses_cores": self.uses_cores,
            "checkpoints": self.checkpoints,
            "timeout_s": self.timeout_s,
            "command": self.command,
            "image": self.image,
        }

    @classmethod
    def from_dict(cls, data: object) -> JobSpec:
        """The job of a payload; `PayloadError` names the first bad field."""
        where = "job payload"
        if not isinstance(data, Mapping):
            raise PayloadError(f"{where}: must be a map, got {type(data).__name__}")
        kind = _str(data, "kind", where)
        if kind not in JOB_KINDS:
            raise PayloadError(f"{where}: field 'kind' must be one of {JOB_KINDS}, got {kind!r}")
        settings = _field(data, "settings", where)
        if not isinstance(settings, Mapping):
            raise PayloadError(f"{where}: field 'settings' must be a map")
        indices = data.get("indices", [])
        if not isinstance(indices, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices
        ):
            raise PayloadError(f"{where}: field 'indices' must be a list of integers >= 0")
        timeout_s = _number(data, "timeout_s", where, default=None)
        spec = cls(
            kind=cast(JobKind, kind),
            run=_str(data, "run", where),
            task=_str(data, "task", where),
            task_type=_str(data, "task_type", where),
            settings=dict(settings),
            paths=JobPaths.from_dict(_field(data, "paths", where)),
            resources=JobResources.from_dict(_field(data, "resources", where)),
            attempt=_int(data, "attempt", where, minimum=1),
            indices=tuple(indices),
            uses_cores=_bool(data, "uses_cores", where),
            checkpoints=_bool(data, "checkpoints", where),
            timeout_s=timeout_s,
            command=_str(data, "command", where, optional=True),
            image=_str(data, "image", where, optional=True),
        )
        given = data.get("job_id")
        if given is not None and given != spec.job_id:
            raise PayloadError(
                f"{where}: field 'job_id' is {given!r} but run, task, indices and attempt "
                f"make {spec.job_id!r}"
            )
        return spec


def queue_for(spec: JobSpec) -> str:
    """The logical queue of a job (`simrun.core.sizing.queue_name` of its image and GPUs)."""
    return queue_name(spec.image, spec.resources.gpus)
