"""The two JSON files ``simrun-exec`` speaks, each with a ``version``: the job it reads
(`CommandSpec`) and the result it writes (`CommandResult`)."""

from __future__ import annotations

import json
import os
import tempfile
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
from simrun.core.wire import Attempt, FiniteNonNeg, FinitePositive, Flag, explain
from simrun.worker.pool.output import DEFAULT_COMMAND_LOG_CAP

JOB_VERSION = 1
RESULT_VERSION = 1

Outcome = Literal["done", "failed", "killed", "timeout"]
OUTCOMES: tuple[Outcome, ...] = ("done", "failed", "killed", "timeout")


class JobFileError(ValueError):
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
_FILE = ConfigDict(frozen=True, extra="forbid")


class _VersionedFile(BaseModel):
    """A JSON file ``simrun-exec`` speaks, with its ``version``: `to_dict` writes it and
    `from_dict` reads it back, raising `JobFileError` naming a missing, unknown or bad field."""

    #: The version this simrun-exec writes and reads.
    VERSION: ClassVar[int]
    #: What the file holds ("job", "result"), and the place named in messages.
    WHAT: ClassVar[str]
    WHERE: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; `from_dict` reads it back."""
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


# --- the job ------------------------------------------------------------------------------


class CommandSpec(_VersionedFile):
    """Everything ``simrun-exec`` needs to run the command of one unsplit task once.

    ``command`` is the type's argv template, ``settings`` the task's settings (JSON data),
    ``paths`` where the task reads and writes. ``limit_gb`` bounds the anonymous memory of
    the command's whole process tree, ``timeout_s`` its wall time (None: no bound).
    ``checkpoints`` keeps the output of earlier attempts; without it, an ``attempt`` above 1
    starts from an empty output directory. ``report`` is where the result goes (None: the
    caller passes ``--report``, else ``task_dir/logs/attempt-<N>.report.json``).
    ``cgroups`` ``auto`` runs the command in a memory cgroup of its own where the kernel
    allows it (``off``, or where it does not: its process tree, simrun-exec being a
    subreaper); ``log_cap`` bounds each of its log files, stdout and stderr, in bytes (its
    head and tail are kept; 0: no bound). ``processes`` is what the command was sized for
    (all the slots of its worker for a type that ``uses_cores``, else 1): the command gets
    it as ``SIMRUN_PROCESSES`` and as its thread counts (`simrun.core.environment`).
    ``image`` with ``engine`` (the container engine's executable) runs the command inside
    that image through the engine (`simrun.worker.engine`); without an engine the command
    runs here, as if this were the image's container.

    Relative paths are taken relative to the working directory of ``simrun-exec``.
    Construction checks every value (a `pydantic.ValidationError`); `from_dict` raises
    `JobFileError` naming the field.
    """

    model_config = _FILE
    VERSION = JOB_VERSION
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


# --- the result ---------------------------------------------------------------------------


class CommandResult(_VersionedFile):
    """What one run of a command came to, as ``simrun-exec`` writes it.

    ``outcome`` is ``done`` (exit code 0), ``failed`` (a non-zero exit, death by a signal
    nobody here sent, or a command that could not start), ``killed`` (its tree passed the
    memory limit, then ``report.killed_for_memory`` is true, or ``simrun-exec`` was told to
    stop) or ``timeout``. ``exit_code`` is None when the command did not exit by itself
    (``signal`` then names the signal that ended it) or never started. ``error`` is empty
    when done; otherwise its first line says why, followed by the end of the command's
    stderr. ``argv`` is None when the template could not be expanded. ``started`` and
    ``finished`` are ISO 8601 UTC times; ``wall_s`` the seconds the command ran.
    ``isolation`` says what bounded the command's processes (a memory cgroup, or its process
    tree and why no cgroup).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")
    VERSION = RESULT_VERSION
    WHAT = "result"
    WHERE = "result"

    outcome: Outcome
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
        """Whether the command succeeded."""
        return self.outcome == "done"


# --- files --------------------------------------------------------------------------------


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` so a reader sees the old file or the whole new one:
    a temporary file in the same directory, flushed to disk, then renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path, what: str) -> Any:
    """The JSON content of ``path``; `JobFileError` says which ``what`` file is unreadable
    or not JSON, and where."""
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
