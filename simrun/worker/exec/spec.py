"""The two JSON files ``simrun-exec`` speaks, each with a ``version``: the job it reads
(`CommandSpec`) and the result it writes (`CommandResult`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from simrun.core.jobs import JobPaths, path_text
from simrun.core.reports import WorkerReport
from simrun.core.unitlogs import write_atomic
from simrun.core.wire import Attempt, FiniteNonNeg, FinitePositive, Flag, explain
from simrun.errors import SimrunError
from simrun.worker.pool.output import DEFAULT_COMMAND_LOG_CAP

#: How a command ended: the part of `simrun.core.wire.Outcome` a command can come to.
CommandOutcome = Literal["done", "failed", "killed", "timeout"]


class JobFileError(SimrunError, ValueError):
    """A job or result file that cannot be used; the message names the field at fault."""


def _json_data(settings: dict[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(settings, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must be JSON data ({exc})") from None
    return settings


#: A path (a string or a `Path` on construction).
FilePath = Annotated[
    Path, BeforeValidator(path_text), Field(description="a non-empty path without NUL")
]
_Text = Annotated[str, Field(strict=True)]


class _VersionedFile(BaseModel):
    """A JSON file ``simrun-exec`` speaks, with its ``version`` (`to_dict`, `from_dict`)."""

    #: The version this simrun-exec writes and reads.
    VERSION: ClassVar[int]
    #: What the file holds ("job", "result"), and the place named in messages.
    WHAT: ClassVar[str]
    WHERE: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.VERSION, **self.model_dump(mode="json")}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """The file ``data`` describes; `JobFileError` names a missing, unknown or bad field."""
        if not isinstance(data, dict):
            raise JobFileError(f"a {cls.WHAT} must be a JSON object, got {type(data).__name__}")
        prefix = f"{cls.WHERE}: " if cls.WHERE else ""
        version = data.get("version")
        if version != cls.VERSION:
            raise JobFileError(
                f"{prefix}field 'version' is {version!r}; this simrun-exec reads version "
                f"{cls.VERSION}"
            )
        try:
            return cls.model_validate({k: v for k, v in data.items() if k != "version"})
        except ValidationError as exc:
            raise JobFileError(explain(exc, cls, cls.WHERE, dotted=True)) from None


class CommandSpec(_VersionedFile):
    """Everything ``simrun-exec`` needs to run the command of one unsplit task once: its
    bounds (``limit_gb``, ``timeout_s``), its logs' cap, how many processes it was sized for,
    its memory cgroup (``cgroups``), and ``image`` with ``engine`` to run it in an image."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    VERSION = 1
    WHAT = "job"
    WHERE = ""

    command: Annotated[str, Field(strict=True, pattern=r"\S", description="a non-empty string")]
    settings: Annotated[
        dict[str, Any], AfterValidator(_json_data), Field(description="a JSON object")
    ]
    paths: JobPaths
    limit_gb: FinitePositive
    timeout_s: FinitePositive | None = None
    checkpoints: Flag = False
    attempt: Attempt = 1
    report: FilePath | None = None
    cgroups: Literal["auto", "off"] = "auto"
    log_cap: Annotated[int, Field(strict=True, ge=0)] = DEFAULT_COMMAND_LOG_CAP
    processes: Annotated[int, Field(strict=True, ge=1)] = 1
    image: Annotated[str, Field(strict=True, pattern=r"\S")] | None = None
    engine: Annotated[str, Field(strict=True, pattern=r"\S")] | None = None


class CommandResult(_VersionedFile):
    """What one run of a command came to: done, failed, killed (memory, or a stop) or
    timeout; ``error``'s first line says why, then the end of its stderr."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    VERSION = 1
    WHAT = "result"
    WHERE = "result"

    outcome: CommandOutcome
    exit_code: Annotated[int, Field(strict=True)] | None
    error: _Text
    report: WorkerReport
    started: _Text
    finished: _Text
    wall_s: FiniteNonNeg = 0.0
    signal: _Text | None = None
    argv: tuple[_Text, ...] | None = None
    attempt: Attempt = 1
    logs: dict[_Text, _Text] = Field(default_factory=dict)
    isolation: _Text = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "done"

    @classmethod
    def not_run(
        cls,
        error: str,
        limit_gb: float = 0.0,
        attempt: int = 1,
        started: str | None = None,
        outcome: CommandOutcome = "failed",
    ) -> CommandResult:
        """The result of a command that never ran: nothing measured, no unit done."""
        now = utc_now()
        return cls(
            outcome=outcome,
            exit_code=None,
            error=error,
            report=WorkerReport.empty(limit_gb),
            started=started or now,
            finished=now,
            attempt=attempt,
        )


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` atomically, flushed to disk."""
    write_atomic(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode(), sync=True)


def read_json(path: Path, what: str) -> Any:
    """The JSON content of ``path``; `JobFileError` says why the ``what`` file cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobFileError(f"{what} {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError(f"{what} {str(path)!r} cannot be read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobFileError(
            f"{what} {str(path)!r} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
