"""What workers write for the service: the measurements of a job (`WorkerReport`), the
entry of the report stream for every job (`ReportEntry`) and the heartbeat (`WorkerInfo`)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from simrun.core.wire import (
    JOB_KINDS,
    OUTCOMES,
    JobKind,
    Outcome,
    PayloadError,
    UnitKey,
    unit_field,
)

__all__ = ["ReportEntry", "StreamReport", "WorkerInfo", "WorkerReport", "now_s"]


@dataclass(frozen=True)
class WorkerReport:
    """The measurements of one job (a chunk of units, a merge or a command) on a worker.

    ``peak_memory_gb`` holds the peak anonymous memory of each worker process that ran the
    job (one entry for a chunk; one per process for a command that uses the cores of its
    container), in GiB. ``seconds_per_unit`` is the wall time of one unit in one process
    (None when no unit completed). ``limit_gb`` is the memory per process the job ran
    under, and ``killed_for_memory`` says whether a process was killed for exceeding it.
    """

    peak_memory_gb: tuple[float, ...]
    seconds_per_unit: float | None
    units: int
    limit_gb: float
    killed_for_memory: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain data for msgpack or JSON (never pickle)."""
        return {
            "peak_memory_gb": list(self.peak_memory_gb),
            "seconds_per_unit": self.seconds_per_unit,
            "units": self.units,
            "limit_gb": self.limit_gb,
            "killed_for_memory": self.killed_for_memory,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerReport:
        """The report that `to_dict` wrote; `ValueError` names a missing or bad field."""
        try:
            peaks = tuple(float(x) for x in data["peak_memory_gb"])
            spu = data["seconds_per_unit"]
            return cls(
                peak_memory_gb=peaks,
                seconds_per_unit=None if spu is None else float(spu),
                units=int(data["units"]),
                limit_gb=float(data["limit_gb"]),
                killed_for_memory=bool(data.get("killed_for_memory", False)),
            )
        except KeyError as exc:
            raise ValueError(f"worker report lacks the field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"worker report has a bad field: {exc}") from exc


def _unit_key(text: str) -> UnitKey:
    return int(text) if text.isdigit() else text


@dataclass(frozen=True)
class ReportEntry:
    """What a worker reports for one job, one entry of the report stream.

    ``outcomes`` has one entry per unit of the job (per index; "merge"/"command" for those
    jobs): done, failed (``errors`` holds its traceback), killed (for memory), timeout,
    not_run (handed back: never started, or cut short by a stop or by an earlier unit's
    process dying), stale (a newer attempt was dispatched) or refused (this worker can
    never run it; ``error`` says why). ``error`` is a message about the whole job.
    ``started``/``finished`` are unix seconds.
    """

    job_id: str
    run: str
    task: str
    kind: JobKind
    attempt: int
    worker_id: str
    outcomes: dict[UnitKey, Outcome]
    report: WorkerReport
    started: float
    finished: float
    errors: dict[UnitKey, str] = field(default_factory=dict)
    error: str | None = None

    def to_fields(self) -> dict[str, str]:
        """The stream entry (XADD): string fields ``v`` ("1"), ``job_id``, ``run``, ``task``,
        ``kind``, ``attempt``, ``worker_id``, ``started``, ``finished`` (unix seconds as
        decimal text), ``outcomes`` (JSON {"<index>"|"merge"|"command": outcome}),
        ``errors`` (JSON, same keys, traceback text), ``report`` (JSON of
        WorkerReport.to_dict) and ``error`` ("" for none)."""
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
        }

    @classmethod
    def from_fields(cls, raw: Mapping[bytes, bytes] | Mapping[str, str]) -> ReportEntry:
        """The entry `to_fields` wrote (bytes or str fields); `PayloadError` names a bad field."""
        data = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }
        where = f"report entry {data.get('job_id', '?')!r}"
        try:
            kind = data["kind"]
            if kind not in JOB_KINDS:
                raise PayloadError(f"{where}: field 'kind' is {kind!r}")
            outcomes_raw = json.loads(data["outcomes"])
            outcomes: dict[UnitKey, Outcome] = {}
            for key, value in outcomes_raw.items():
                if value not in OUTCOMES:
                    raise PayloadError(f"{where}: unit {key} has the unknown outcome {value!r}")
                outcomes[_unit_key(key)] = value
            errors = {_unit_key(k): str(v) for k, v in json.loads(data["errors"]).items()}
            return cls(
                job_id=data["job_id"],
                run=data["run"],
                task=data["task"],
                kind=cast(JobKind, kind),
                attempt=int(data["attempt"]),
                worker_id=data["worker_id"],
                outcomes=outcomes,
                errors=errors,
                report=WorkerReport.from_dict(json.loads(data["report"])),
                started=float(data["started"]),
                finished=float(data["finished"]),
                error=data.get("error") or None,
            )
        except KeyError as exc:
            raise PayloadError(f"{where}: the field {exc.args[0]!r} is missing") from None
        except (ValueError, TypeError, AttributeError) as exc:
            if isinstance(exc, PayloadError):
                raise
            raise PayloadError(f"{where}: bad field: {exc}") from exc


@dataclass(frozen=True)
class StreamReport:
    """One entry read from the report stream: its stream id and the entry, or why it could
    not be read (``problem``); acknowledge both kinds."""

    id: str
    entry: ReportEntry | None
    problem: str | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker container says about itself in its heartbeat.

    ``running`` lists its jobs as maps {job_id, run, task, kind, indices, attempt, state}
    where state is "waiting" (held, not admitted yet) or "running".
    """

    id: str
    queues: tuple[str, ...]
    memory_gb: float
    processes: int
    gpus: int
    free_memory_gb: float
    free_processes: int
    running: tuple[dict[str, Any], ...]
    host: str
    pid: int
    started: float
    updated: float
    stopping: bool = False

    def to_json(self) -> str:
        data = {**self.__dict__, "queues": list(self.queues), "running": list(self.running)}
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo:
        try:
            data = json.loads(text)
            return cls(
                **{**data, "queues": tuple(data["queues"]), "running": tuple(data["running"])}
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise PayloadError(f"worker heartbeat cannot be read: {exc}") from exc


def now_s() -> float:
    """Unix time in seconds (report and heartbeat times)."""
    return time.time()
