"""What workers write for the service: the measurements of a job (`WorkerReport`), the
entry of the report stream for every job (`ReportEntry`) and the heartbeat (`WorkerInfo`)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simrun.core.jobs import JobSpec
from simrun.core.wire import (
    Attempt,
    Count,
    FiniteNonNeg,
    Flag,
    JobKind,
    Outcome,
    PayloadError,
    UnitKey,
    explain,
    unit_field,
)

if TYPE_CHECKING:
    from simrun.core.signing import JobKey

_WIRE = ConfigDict(frozen=True, extra="ignore")


class WorkerReport(BaseModel):
    """The measurements of one job on a worker (peak memory per process, seconds per unit,
    its limit, a kill for memory, GPU memory, staging, scratch), all finite and >= 0."""

    model_config = _WIRE

    peak_memory_gb: Annotated[
        tuple[FiniteNonNeg, ...], Field(description="a list of finite numbers >= 0")
    ]
    seconds_per_unit: FiniteNonNeg | None
    units: Count
    limit_gb: FiniteNonNeg
    killed_for_memory: Flag = False
    peak_gpu_memory_gb: FiniteNonNeg | None = None
    #: Bytes this job staged into the task's local scratch, and the seconds that took.
    staged_bytes: Count = 0
    staged_s: FiniteNonNeg = 0.0
    #: The most local scratch the task used while the job ran (GiB; None: not measured).
    scratch_gb: FiniteNonNeg | None = None

    @classmethod
    def empty(cls, limit_gb: float) -> WorkerReport:
        """The report of a job that measured nothing: no process, no unit done."""
        return cls(peak_memory_gb=(), seconds_per_unit=None, units=0, limit_gb=limit_gb)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for msgpack or JSON (never pickle)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerReport:
        """The report that `to_dict` wrote; `ValueError` names a missing or bad field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(explain(exc, cls, "worker report")) from None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _unit_key(text: str) -> UnitKey:
    return int(text) if text.isdigit() else text


def _unit_map(text: str) -> dict[UnitKey, Any]:
    """A JSON map of unit fields ("4", "merge") to values, with integer unit keys."""
    return {_unit_key(k): v for k, v in json.loads(text).items()}


#: How each stream field (a string) becomes the value of the `ReportEntry` field.
_STREAM_FIELDS: dict[str, Any] = {
    "job_id": str,
    "run": str,
    "task": str,
    "kind": str,
    "attempt": int,
    "worker_id": str,
    "started": float,
    "finished": float,
    "outcomes": _unit_map,
    "errors": _unit_map,
    "report": lambda text: WorkerReport.from_dict(json.loads(text)),
}


class ReportEntry(BaseModel):
    """One job's entry of the report stream: an outcome per unit, their tracebacks and
    exception types (what ``retry_on`` matches), and a message about the whole job."""

    model_config = _WIRE

    job_id: str
    run: str
    task: str
    kind: JobKind
    attempt: Attempt
    worker_id: str
    outcomes: Annotated[dict[UnitKey, Outcome], Field(description="a map of unit to outcome")]
    report: WorkerReport
    started: float
    finished: float
    errors: dict[UnitKey, str] = Field(default_factory=dict)
    error: str | None = None
    exceptions: dict[UnitKey, tuple[str, ...]] = Field(default_factory=dict)

    def to_fields(self, key: JobKey) -> dict[str, str]:
        """The stream entry (XADD): string fields, the maps and the report as JSON, signed
        with ``key`` (field ``sig``)."""
        fields = self._fields()
        return {**fields, "sig": key.sign_fields(fields)}

    def _fields(self) -> dict[str, str]:
        return {
            "v": "1",
            "job_id": self.job_id,
            "run": self.run,
            "task": self.task,
            "kind": self.kind,
            "attempt": str(self.attempt),
            "worker_id": self.worker_id,
            "started": repr(self.started),
            "finished": repr(self.finished),
            "outcomes": json.dumps({unit_field(k): v for k, v in self.outcomes.items()}),
            "errors": json.dumps({unit_field(k): v for k, v in self.errors.items()}),
            "report": json.dumps(self.report.to_dict()),
            "error": self.error or "",
        } | (
            {"exceptions": json.dumps({unit_field(k): list(v) for k, v in self.exceptions.items()})}
            if self.exceptions
            else {}
        )

    @classmethod
    def from_fields(
        cls, raw: Mapping[bytes, bytes] | Mapping[str, str], key: JobKey
    ) -> ReportEntry:
        """The entry `to_fields` wrote (bytes or str fields) if ``key`` signed it;
        `PayloadError` names what is wrong (unsigned, another key, a bad field)."""
        try:
            data = {_text(k): _text(v) for k, v in raw.items()}
        except UnicodeDecodeError as exc:
            raise PayloadError(f"report entry: a field is not UTF-8 text ({exc})") from None
        where = f"report entry {data.get('job_id', '?')!r}"
        signature = data.pop("sig", None)
        key.check_fields(data, signature, where)
        values: dict[str, Any] = {"error": data.get("error") or None}
        if data.get("exceptions"):
            try:
                values["exceptions"] = _unit_map(data["exceptions"])
            except (ValueError, TypeError, AttributeError) as exc:
                raise PayloadError(f"{where}: bad field 'exceptions': {exc}") from None
        for name, parse in _STREAM_FIELDS.items():
            if name not in data:
                raise PayloadError(f"{where}: the field {name!r} is missing")
            try:
                values[name] = parse(data[name])
            except (ValueError, TypeError, AttributeError) as exc:
                raise PayloadError(f"{where}: bad field {name!r}: {exc}") from None
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise PayloadError(explain(exc, cls, where)) from None


@dataclass(frozen=True)
class StreamReport:
    """One entry read from the report stream, or why it could not be read (``problem``,
    with the ``raw`` fields)."""

    id: str
    entry: ReportEntry | None
    problem: str | None = None
    raw: Mapping[bytes, bytes] | None = None


class RunningJob(BaseModel):
    """A job a worker holds, in its heartbeat: "waiting" (not admitted yet) or "running"."""

    model_config = _WIRE

    job_id: str
    run: str
    task: str
    kind: JobKind
    indices: tuple[int, ...]
    attempt: int
    state: Literal["waiting", "running"]

    @classmethod
    def of(cls, spec: JobSpec, state: Literal["waiting", "running"] = "waiting") -> RunningJob:
        """The record of the job ``spec`` (built from a checked spec: not validated again)."""
        return cls.model_construct(**spec.identity(), indices=spec.indices, state=state)

    def admitted(self) -> RunningJob:
        """The same job, now running."""
        return self.model_copy(update={"state": "running"})


class WorkerInfo(BaseModel):
    """A worker container's heartbeat (JSON): its jobs, memory, processes and scratch."""

    model_config = _WIRE

    id: str
    queues: tuple[str, ...]
    memory_gb: float
    processes: int
    gpus: int
    free_memory_gb: float
    free_processes: int
    running: tuple[RunningJob, ...]
    host: str
    pid: int
    started: float
    updated: float
    stopping: bool = False
    free_scratch_gb: float | None = None
    used_memory_gb: float | None = None
    #: The worker's clock minus the Redis server's (seconds) at its last beat; None until
    #: measured.
    clock_skew_s: Annotated[float, Field(allow_inf_nan=False)] | None = None

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo:
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise PayloadError(explain(exc, cls, "worker heartbeat cannot be read")) from None


def now_s() -> float:
    """Unix time in seconds (report and heartbeat times)."""
    return time.time()
