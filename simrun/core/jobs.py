"""The job payload (`JobSpec`): what the service sends a worker for one job."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic import ValidationError as _ValidationError

from simrun.core.ranges import Ranges
from simrun.core.sizing import queue_name
from simrun.core.wire import (
    Attempt,
    Count,
    FiniteNonNeg,
    Flag,
    JobKind,
    NonEmptyStr,
    PayloadError,
    UnitKey,
    explain,
    job_id,
)
from simrun.plugins import TaskPaths


def path_text(value: object) -> str:
    """The text of a path (a string or a `os.PathLike`): non-empty and without NUL."""
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if not isinstance(text, str) or not text or "\0" in text:
        raise ValueError("must be a non-empty path without NUL")
    return text


def _identifier(port: str) -> str:
    if not port.isidentifier():
        raise ValueError("must be an identifier (an input port name)")
    return port


#: A path as text (a `Path` is taken as its text).
PathText = Annotated[
    str, BeforeValidator(path_text), Field(description="a non-empty path without NUL")
]
#: The name of an input port: an identifier.
PortName = Annotated[str, Field(strict=True), AfterValidator(_identifier)]

#: Wire models: frozen, and unknown fields are ignored (a newer sender may add some).
_WIRE = ConfigDict(frozen=True, extra="ignore")


class JobResources(BaseModel):
    """The resolved resources a job runs under (see simrun.resources.ResolvedResources)."""

    model_config = _WIRE

    memory_base_gb: FiniteNonNeg
    memory_per_worker_gb: FiniteNonNeg
    scratch_gb: FiniteNonNeg = 0.0
    gpus: Count = 0
    seconds_per_unit: FiniteNonNeg | None = None


class JobPaths(BaseModel):
    """`TaskPaths` on the wire, as strings: the one shape of the job payload's and of
    simrun-exec's job file; built from a map or a `TaskPaths`, no unknown field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # inputs first, so that a map lacking several fields names inputs first
    inputs: Annotated[dict[PortName, PathText], Field(description="a map of port names to paths")]
    store: PathText
    run_dir: PathText
    task_dir: PathText
    out: PathText
    scratch: PathText

    @model_validator(mode="before")
    @classmethod
    def _from_task_paths(cls, data: object) -> object:
        if not isinstance(data, TaskPaths):
            return data
        inputs = {port: str(p) for port, p in sorted(data.inputs.items())}
        fields = ("store", "run_dir", "task_dir", "out", "scratch")
        return {"inputs": inputs, **{name: str(getattr(data, name)) for name in fields}}

    @classmethod
    def of(cls, paths: TaskPaths) -> JobPaths:
        """The wire form of ``paths`` (ports sorted by name)."""
        return cls.model_validate(paths)

    def task_paths(self) -> TaskPaths:
        return TaskPaths(
            store=Path(self.store),
            run_dir=Path(self.run_dir),
            task_dir=Path(self.task_dir),
            out=Path(self.out),
            inputs={port: Path(p) for port, p in self.inputs.items()},
            scratch=Path(self.scratch),
        )

    def absolute(self) -> JobPaths:
        """These paths made absolute against the current working directory."""
        data = self.model_dump()
        whole = {k: str(Path(v).absolute()) for k, v in data.items() if k != "inputs"}
        inputs = {port: str(Path(v).absolute()) for port, v in self.inputs.items()}
        return JobPaths.model_validate({**whole, "inputs": inputs})


class JobSpec(BaseModel):
    """One job: a chunk of units (``indices``), the merge, or the command of an unsplit task;
    `from_dict` raises `PayloadError` naming the first bad field."""

    model_config = _WIRE

    kind: JobKind
    run: NonEmptyStr
    task: NonEmptyStr
    task_type: NonEmptyStr
    settings: Annotated[dict[str, Any], Field(description="a map")]
    paths: Annotated[JobPaths, Field(description="a map of paths")]
    resources: Annotated[JobResources, Field(description="a map of resources")]
    attempt: Attempt = 1
    indices: Annotated[
        tuple[Annotated[int, Field(strict=True, ge=0)], ...],
        Field(description="a list of integers >= 0"),
    ] = ()
    uses_cores: Flag = False
    checkpoints: Flag = False
    timeout_s: FiniteNonNeg | None = None
    #: No ``command``: a command job runs its type's template as installed on the worker,
    #: never a string of the payload (one sent by an older service is ignored).
    image: NonEmptyStr | None = None
    #: Input ports the worker copies into the task's local scratch before it runs.
    staged: tuple[PortName, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        where = f"job {self.run}:{self.task}"
        if self.kind == "chunk" and not self.indices:
            raise PayloadError(f"{where}: a chunk job needs at least one unit index")
        if self.kind != "chunk" and self.indices:
            raise PayloadError(f"{where}: a {self.kind} job takes no unit indices")
        if len(set(self.indices)) != len(self.indices):
            raise PayloadError(f"{where}: field 'indices' names a unit twice")
        if not set(self.staged) <= set(self.paths.inputs):
            raise PayloadError(f"{where}: field 'staged' names a port the job has no input for")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise PayloadError(f"{where}: field 'timeout_s' must be > 0 or null")
        return self

    @property
    def job_id(self) -> str:
        return job_id(self.run, self.task, self.kind, self.indices, self.attempt)

    def identity(self) -> dict[str, Any]:
        """What names the job in a report or a heartbeat."""
        return {
            "job_id": self.job_id,
            "run": self.run,
            "task": self.task,
            "kind": self.kind,
            "attempt": self.attempt,
        }

    @property
    def units(self) -> tuple[UnitKey, ...]:
        """What the job's report has outcomes for: the indices, or its kind."""
        return self.indices if self.kind == "chunk" else (self.kind,)

    def to_dict(self) -> dict[str, Any]:
        """The payload on the wire (msgpack): the fields with the indices as inclusive ``ranges``
        (a chunk of a thousand units is a few bytes), and the derived ``job_id``."""
        data = self.model_dump()
        del data["indices"]
        data["ranges"] = Ranges.of_indices(self.indices).to_wire()
        return {"job_id": self.job_id, **data}

    @classmethod
    def from_dict(cls, data: object) -> JobSpec:
        """The job of a payload; `PayloadError` names the first bad field and its value."""
        where = "job payload"
        if not isinstance(data, Mapping):
            raise PayloadError(f"{where}: must be a map, got {type(data).__name__}")
        if "ranges" in data:
            if "indices" in data:
                raise PayloadError(f"{where}: fields 'ranges' and 'indices' both given")
            data = {**data, "indices": tuple(Ranges.from_wire(data["ranges"], MAX_JOB_UNITS))}
            del data["ranges"]
        try:
            spec = cls.model_validate(data)
        except _ValidationError as exc:
            raise PayloadError(explain(exc, cls, where)) from None
        given = data.get("job_id")
        if given is not None and given != spec.job_id:
            raise PayloadError(
                f"{where}: field 'job_id' is {given!r} but run, task, indices and attempt "
                f"make {spec.job_id!r}"
            )
        return spec


#: The most units one job payload may name (chunks are far smaller).
MAX_JOB_UNITS = 1_000_000


def queue_for(spec: JobSpec) -> str:
    """The logical queue of a job (`simrun.core.sizing.queue_name` of its image and GPUs)."""
    return queue_name(spec.image, spec.resources.gpus)
