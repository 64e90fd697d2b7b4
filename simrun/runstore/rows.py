"""The rows of the run store as frozen dataclasses, and their conversion from SQL rows."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from simrun.core.reports import ReportEntry
from simrun.core.states import RunState, TaskCounts, TaskPhase, TaskState, UnitKind, UnitRow
from simrun.errors import SimrunError


class UnknownRunError(SimrunError, LookupError):
    """There is no run of that id (the HTTP API answers 404)."""


class RunStateError(SimrunError, ValueError):
    """What was asked of a run cannot be done in its state, and why (the HTTP API answers
    409)."""


@dataclass(frozen=True)
class NewTask:
    """A task of a run being created (the columns: `simrun.runstore.schema`). ``inputs``
    maps each port to the path it reads; ``retry`` holds its own retry fields."""

    name: str
    type: str
    position: int
    settings: dict[str, Any]
    inputs: dict[str, str]
    depends: tuple[str, ...]
    splittable: bool
    has_merge: bool
    override: dict[str, Any] | None = None
    retry: dict[str, Any] | None = None
    fingerprint: str | None = None
    reuse: bool = False
    unit_fingerprint: str | None = None
    staged: tuple[str, ...] = ()


@dataclass(frozen=True)
class NewRun:
    """A run being created, with its tasks."""

    id: str
    name: str | None
    model: str
    document: str
    tasks: tuple[NewTask, ...]
    created_s: float
    image: str | None = None


@dataclass(frozen=True)
class RunRow:
    """A run as stored, with its pauses (stopped and resumed, None: still stopped)."""

    id: str
    name: str | None
    model: str
    state: RunState
    message: str
    document: str
    created_s: float
    updated_s: float
    finished_s: float | None
    pauses: tuple[tuple[float, float | None], ...] = ()
    image: str | None = None

    def task_image(self, type_image: str | None) -> str | None:
        """The image a task of this run runs in: its type's, else the run's."""
        return type_image if type_image is not None else self.image


@dataclass(frozen=True, kw_only=True)
class TaskRow(NewTask):
    """A task as stored: the task as it was created, and what became of it (the columns:
    `simrun.runstore.schema`)."""

    run: str
    memory_override_gb: float | None
    state: TaskState
    status: str
    queue: str | None
    resource_key: str | None
    resources: dict[str, Any] | None
    units: int | None
    started_s: float | None
    finished_s: float | None
    kills: int = 0
    requested_gb: float | None = None
    peak_memory_gb: float | None = None
    peak_gpu_memory_gb: float | None = None
    frontier: int = 0
    spans_done: int = 0
    reused_from: str | None = None
    units_reused: int = 0
    units_reused_from: str | None = None
    staged_bytes: int = 0
    staged_s: float = 0.0
    scratch_peak_gb: float | None = None
    phase: TaskPhase = TaskPhase.USUAL


@dataclass(frozen=True)
class Job:
    """What names a job: its id, run, task, kind of units, logical queue and attempt."""

    id: str
    run: str
    task: str
    kind: UnitKind
    queue: str
    attempt: int


@dataclass(frozen=True)
class NewJob(Job):
    """A job being dispatched: its units go from pending to queued. A ``fresh`` job takes
    the next units from its task's frontier (``indices`` a `range`), which get no row."""

    indices: Sequence[int]
    memory_gb: float
    fresh: bool = False


@dataclass(frozen=True)
class JobRow(Job):
    """A job in flight, and the worker container that said it holds it. A range job
    (``first_idx`` set) holds the units ``first_idx..last_idx``, which have no row."""

    units: int
    worker: str | None
    enqueued_s: float
    first_idx: int | None = None
    last_idx: int | None = None
    memory_gb: float | None = None
    running: bool = False
    started_s: float | None = None


@dataclass
class Applied:
    """What `RunStore.apply_reports` did: the entries whose job was in flight (``recorded``:
    their measurements are new), the tasks whose units changed, a refusal per task, and
    how many units changed."""

    recorded: list[ReportEntry] = field(default_factory=list)
    touched: set[tuple[str, str]] = field(default_factory=set)
    refused: dict[tuple[str, str], str] = field(default_factory=dict)
    changed: int = 0


#: The columns of the fields of the row types that are not named as their field.
_COLUMN = {"run": "run_id", "index": "idx"}
_FIELD = {c: f for f, c in _COLUMN.items()}


def _columns(row_type: type, leave_out: tuple[str, ...] = ()) -> str:
    """The columns a row type is read from, in the order of its fields."""
    return ", ".join(
        _COLUMN.get(f.name, f.name) for f in fields(row_type) if f.name not in leave_out
    )


RUN_COLUMNS = _columns(RunRow, leave_out=("pauses",))
TASK_COLUMNS = _columns(TaskRow)
JOB_COLUMNS = _columns(JobRow)
UNIT_COLUMNS = _columns(UnitRow)
#: What an update of a unit sets: every field from its state on (the key comes before).
_UNIT_SETS = [f.name for f in fields(UnitRow)][4:]
UPDATE_UNIT = (
    f"UPDATE units SET {', '.join(f'{c} = ?' for c in _UNIT_SETS)}"
    " WHERE run_id = ? AND task = ? AND idx = ?"
)


def unit_values(u: UnitRow) -> tuple[Any, ...]:
    """The values of `UPDATE_UNIT` for ``u``."""
    return (*(getattr(u, c) for c in _UNIT_SETS), u.run, u.task, u.index)


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def loads(text: Any) -> Any:
    return None if text is None else json.loads(text)


def insert(table: str, row: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The INSERT of ``row`` (column → value) into ``table``, and its parameters."""
    columns = ", ".join(row)
    values = ", ".join(f":{c}" for c in row)
    return f"INSERT INTO {table} ({columns}) VALUES ({values})", row


def run_values(run: NewRun) -> dict[str, Any]:
    """The row of a new run (state running)."""
    names = ("id", "name", "model", "document", "image", "created_s")
    return {**{n: getattr(run, n) for n in names}, "state": "running", "updated_s": run.created_s}


def task_values(run_id: str, task: NewTask) -> dict[str, Any]:
    """The row of a new task of a run (state waiting; no unit, queue or resources yet)."""
    values = {f.name: getattr(task, f.name) for f in fields(NewTask)}
    for flag in ("splittable", "has_merge", "reuse"):
        values[flag] = int(values[flag])
    return {
        **values,
        "run_id": run_id,
        "state": "waiting",
        "settings": json.dumps(task.settings, sort_keys=True),
        "inputs": json.dumps(task.inputs, sort_keys=True),
        "depends": json.dumps(list(task.depends)),
        "override": dumps(task.override),
        "retry": dumps(task.retry),
        "staged": dumps(list(task.staged)) if task.staged else None,
    }


def job_values(job: NewJob, now_s: float) -> dict[str, Any]:
    """The row of a job going in flight now; a fresh job keeps the range of its units."""
    names = ("id", "task", "kind", "queue", "attempt", "memory_gb")
    return {
        **{n: getattr(job, n) for n in names},
        "run_id": job.run,
        "units": len(job.indices),
        "enqueued_s": now_s,
        "first_idx": job.indices[0] if job.fresh else None,
        "last_idx": job.indices[-1] if job.fresh else None,
    }


def job_of(row: Sequence[Any]) -> JobRow:
    """A job from a row of ``SELECT {JOB_COLUMNS}``."""
    values = _named(JOB_COLUMNS, row)
    values["running"] = bool(values["running"])
    return JobRow(**values)


def _named(columns: str, row: Sequence[Any]) -> dict[str, Any]:
    """A row of ``SELECT {columns}`` by field name (``run_id`` is ``run``)."""
    names = [c.strip() for c in columns.split(",")]
    return {_FIELD.get(n, n): v for n, v in zip(names, row, strict=True)}


def run_of(row: Sequence[Any]) -> RunRow:
    """A run from a row of ``SELECT {RUN_COLUMNS}``."""
    return RunRow(**_named(RUN_COLUMNS, row))


def task_of(row: Sequence[Any]) -> TaskRow:
    """A task from a row of ``SELECT {TASK_COLUMNS}`` (JSON and flags decoded)."""
    values = _named(TASK_COLUMNS, row)
    for name in ("settings", "inputs", "override", "resources", "retry"):
        values[name] = loads(values[name])
    values["depends"] = tuple(json.loads(values["depends"]))
    values["staged"] = tuple(loads(values["staged"]) or ())
    values["phase"] = TaskPhase(values["phase"])
    values["splittable"], values["has_merge"], values["reuse"] = (
        bool(values["splittable"]),
        bool(values["has_merge"]),
        bool(values["reuse"]),
    )
    return TaskRow(**values)


def unit_of(row: Sequence[Any]) -> UnitRow:
    return UnitRow(*row)


def counts_of(rows: Iterable[Sequence[Any]]) -> dict[str, TaskCounts]:
    """Task → `TaskCounts` from rows of (task, kind, state, count), added up."""
    by_task: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    merges: dict[str, str] = {}
    for task, kind, state, n in rows:
        if kind == "merge":
            merges[str(task)] = str(state)
        else:
            by_task[str(task)][str(state)] += int(n)
    return {
        task: TaskCounts.of(by_task.get(task, {}), merges.get(task))
        for task in sorted(set(by_task) | set(merges))
    }


@dataclass(frozen=True)
class UnitRange:
    """Units with no row of their own, alike but for their index: those of a range job in
    flight, of a span (done) or past a task's frontier (pending). ``fields`` are what their
    rows would say but ``index``; `unit` makes one."""

    indices: range
    fields: Mapping[str, Any]

    def unit(self, index: int) -> UnitRow:
        return UnitRow(index=index, **self.fields)


def job_range(job: JobRow) -> UnitRange:
    """The units of a range job in flight, queued or running."""
    if job.first_idx is None or job.last_idx is None:
        raise ValueError(f"job {job.id} is no range job: its units have rows")
    return UnitRange(
        range(job.first_idx, job.last_idx + 1),
        {
            "run": job.run,
            "task": job.task,
            "kind": "chunk",
            "state": "running" if job.running else "queued",
            "attempt": job.attempt,
            "job_id": job.id,
            "memory_gb": job.memory_gb,
            "worker": job.worker,
            "queued_s": job.enqueued_s,
            "started_s": job.started_s if job.running else None,
        },
    )


def span_range(row: Sequence[Any]) -> UnitRange:
    """The units of a span (a row of ``SELECT {SPAN_COLUMNS}``), done."""
    run, task, first, last, attempt, job_id, memory_gb, worker, queued_s, started_s, finished_s = (
        row
    )
    return UnitRange(
        range(int(first), int(last) + 1),
        {
            "run": str(run),
            "task": str(task),
            "kind": "chunk",
            "state": "done",
            "attempt": int(attempt),
            "job_id": str(job_id),
            "memory_gb": memory_gb,
            "worker": worker,
            "queued_s": queued_s,
            "started_s": started_s,
            "finished_s": finished_s,
        },
    )


def fresh_range(run: str, task: str, fresh: range) -> UnitRange:
    """The units of a task never dispatched (from its frontier on), pending."""
    return UnitRange(fresh, {"run": run, "task": task, "kind": "chunk", "state": "pending"})
