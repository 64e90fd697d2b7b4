"""What is shown of runs: the views the service builds from its rows, the HTTP API sends
as JSON (`to_dict`) and `simrun.client.Client` parses back (`parse_run` and friends); the
error answers of the HTTP API (`ErrorView`); what a client knows of a task type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter

from simrun.plugins import TaskType, unit_outputs


@dataclass(frozen=True)
class TaskView:
    """One task: its state, status message (why it is blocked or failed, or that it probes),
    units by state, ETA (`simrun.core.eta`; None while unknown) and observed rate, kills
    for memory, requested and peak memory, where its outputs are (when the reader knows),
    the run it reused from (whole or per unit), what staging and scratch took."""

    name: str
    type: str
    state: str
    status: str
    queue: str | None
    resources: dict[str, Any] | None
    units: int | None
    counts: dict[str, int]
    merge: str | None
    seconds_per_unit: float | None
    eta_s: float | None
    resource_key: str | None = None
    depends: tuple[str, ...] = ()
    splittable: bool = True
    started_s: float | None = None
    finished_s: float | None = None
    kills: int | None = None
    requested_gb: float | None = None
    peak_memory_gb: float | None = None
    peak_gpu_memory_gb: float | None = None
    out: str | None = None
    units_per_s: float | None = None
    reused_from: str | None = None
    units_reused: int = 0
    units_reused_from: str | None = None
    staged_bytes: int = 0
    staged_s: float = 0.0
    scratch_peak_gb: float | None = None
    #: `simrun.core.states.TaskPhase`: "probing" while a probe of its units goes first.
    phase: str = ""

    def count(self, state: str) -> int:
        """Its units in ``state`` (0 when the view does not count them)."""
        return self.counts.get(state, 0)


@dataclass(frozen=True)
class RunSummary:
    """One run in a list of the latest runs: no tasks."""

    id: str
    name: str | None
    state: str
    message: str
    created_s: float
    updated_s: float
    finished_s: float | None
    model: str = ""
    pauses: tuple[tuple[float, float | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RunView(RunSummary):
    """One run with its tasks and ETA (`simrun.core.eta.run_eta_s`; 0 once it ended)."""

    tasks: tuple[TaskView, ...] = ()
    eta_s: float | None = None


@dataclass(frozen=True)
class FailureView:
    """A failed unit (an index, or ``merge``/``command``) and its last traceback."""

    task: str
    unit: int | str
    attempt: int = 0
    errors: int = 0
    kills: int = 0
    worker: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ErrorCode(StrEnum):
    """What an error answer of the HTTP API is: the client acts on it."""

    BAD_REQUEST = "bad_request"  # 400: a request that cannot be read
    UNAUTHORIZED = "unauthorized"  # 401: the bearer token is missing or wrong
    NOT_FOUND = "not_found"  # 404: no such route, task, unit or log
    UNKNOWN_RUN = "unknown_run"  # 404: no run of that id
    UNKNOWN_KEY = "unknown_key"  # 404: a resource key without observations
    METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
    RUN_STATE = "run_state"  # 409: the run's state does not allow what was asked
    TOO_LARGE = "too_large"  # 413: a body past its limit
    INVALID = "invalid"  # 422: a parameter or a field of the body is wrong
    REJECTED = "rejected"  # 422: a workflow refused, every problem in ``errors``
    UNAVAILABLE = "unavailable"  # 503: Redis does not answer
    NO_SPACE = "no_space"  # 507: a volume of the service is full (the detail names it)
    INTERNAL = "internal"  # 500: a bug of the service (its log has the traceback)


@dataclass(frozen=True)
class ErrorView:
    """The body of every error answer of the HTTP API; ``errors``: the problems of a refused
    workflow."""

    code: ErrorCode
    detail: str
    errors: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def running_seconds(
    start_s: float, end_s: float, pauses: Sequence[tuple[float, float | None]] = ()
) -> float:
    """The seconds from ``start_s`` to ``end_s`` less the ``pauses`` (an open one lasts to
    ``end_s``)."""
    total = max(0.0, end_s - start_s)
    for stopped, resumed in pauses:
        overlap = min(end_s, end_s if resumed is None else resumed) - max(start_s, stopped)
        total -= max(0.0, overlap)
    return max(0.0, total)


#: Views from their JSON; `ValueError` (pydantic's) names what does not fit.
parse_task = TypeAdapter(TaskView).validate_python
parse_run = TypeAdapter(RunView).validate_python  # GET /runs/{id}
parse_runs = TypeAdapter(list[RunSummary]).validate_python  # GET /runs
parse_failures = TypeAdapter(list[FailureView]).validate_python  # GET /runs/{id}/failures
parse_error = TypeAdapter(ErrorView).validate_python  # an error answer (not a proxy's)


def type_info(task_type: TaskType) -> dict[str, Any]:
    """What a client knows of a task type (``GET /types``, ``simrun types --json``, the
    Editor's palette): ports, hint, traits, unit outputs and settings schema."""
    declared = unit_outputs(task_type)
    return {
        "name": task_type.name,
        "description": task_type.description,
        "inputs": list(task_type.inputs),
        "outputs": list(task_type.outputs),
        "splittable": task_type.splittable,
        "hint": asdict(task_type.hint),
        "cost_setting": task_type.cost_setting,
        "uses_cores": task_type.uses_cores,
        "image": task_type.image,
        "checkpoints": task_type.checkpoints,
        "unit_outputs": None if declared is None else asdict(declared),
        "settings_schema": task_type.settings.model_json_schema(),
    }
