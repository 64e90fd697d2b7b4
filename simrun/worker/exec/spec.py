"""The two files ``simrun-exec`` speaks: the job it reads and the result it writes.

A worker writes a `CommandSpec` as JSON (``CommandSpec.to_dict``) and starts
``simrun-exec --job FILE``; ``simrun-exec`` writes a `CommandResult` as JSON to the report
path. Both are plain JSON (never pickle) and carry a ``version``, so that a worker and a
``simrun-exec`` of different releases notice they disagree instead of guessing.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from simrun.core.reports import WorkerReport
from simrun.plugins import TaskPaths

__all__ = [
    "JOB_VERSION",
    "OUTCOMES",
    "RESULT_VERSION",
    "CommandResult",
    "CommandSpec",
    "JobFileError",
    "Outcome",
    "read_json",
    "write_json_atomic",
]

JOB_VERSION = 1
RESULT_VERSION = 1

Outcome = Literal["done", "failed", "killed", "timeout"]
OUTCOMES: tuple[Outcome, ...] = ("done", "failed", "killed", "timeout")

_PATH_FIELDS = ("store", "run_dir", "task_dir", "out", "scratch")
_JOB_FIELDS = frozenset(
    {
        "version",
        "command",
        "settings",
        "paths",
        "limit_gb",
        "timeout_s",
        "checkpoints",
        "attempt",
        "report",
    }
)


class JobFileError(ValueError):
    """A job or result file that cannot be used; the message names the field at fault."""


# --- small checks -------------------------------------------------------------------------


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(name: str, value: object) -> float:
    if not _number(value) or not cast(float, value) > 0:
        raise JobFileError(f"field {name!r} must be a finite number > 0, got {value!r}")
    return float(cast(float, value))


def _path(name: str, value: object) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise JobFileError(f"field {name!r} must be a path string, got {value!r}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text or "\0" in text:
        raise JobFileError(f"field {name!r} must be a non-empty path without NUL, got {value!r}")
    return Path(text)


def _port_name_problem(port: object) -> str | None:
    if not isinstance(port, str) or not port.isidentifier():
        return f"input port {port!r} is not an identifier"
    return None


# --- the job ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandSpec:
    """Everything ``simrun-exec`` needs to run the command of one unsplit task once.

    ``command`` is the type's argv template, ``settings`` the task's settings (JSON data),
    ``paths`` where the task reads and writes. ``limit_gb`` bounds the anonymous memory of
    the command's whole process tree, ``timeout_s`` its wall time (None: no bound).
    ``checkpoints`` keeps the output of earlier attempts; without it, an ``attempt`` above 1
    starts from an empty output directory. ``report`` is where the result goes (None: the
    caller passes ``--report``, else ``task_dir/logs/attempt-<N>.report.json``).

    Relative paths are taken relative to the working directory of ``simrun-exec``.
    Construction checks every value and raises `JobFileError` naming the field.
    """

    command: str
    settings: dict[str, Any]
    paths: TaskPaths
    limit_gb: float
    timeout_s: float | None = None
    checkpoints: bool = False
    attempt: int = 1
    report: Path | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise JobFileError(f"field 'command' must be a non-empty string, got {self.command!r}")
        if not isinstance(self.settings, dict):
            raise JobFileError(
                f"field 'settings' must be a JSON object, got {type(self.settings).__name__}"
            )
        try:
            json.dumps(self.settings, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise JobFileError(f"field 'settings' is not JSON data: {exc}") from None
        if not isinstance(self.paths, TaskPaths):
            raise JobFileError("field 'paths' must be a simrun.plugins.TaskPaths")
        for name in _PATH_FIELDS:
            _path(f"paths.{name}", getattr(self.paths, name))
        if not isinstance(self.paths.inputs, dict):
            raise JobFileError("field 'paths.inputs' must be an object of port to path")
        for port, where in self.paths.inputs.items():
            problem = _port_name_problem(port)
            if problem is not None:
                raise JobFileError(f"field 'paths.inputs': {problem}")
            _path(f"paths.inputs.{port}", where)
        _positive("limit_gb", self.limit_gb)
        if self.timeout_s is not None:
            _positive("timeout_s", self.timeout_s)
        if not isinstance(self.checkpoints, bool):
            raise JobFileError(
                f"field 'checkpoints' must be true or false, got {self.checkpoints!r}"
            )
        if not isinstance(self.attempt, int) or isinstance(self.attempt, bool) or self.attempt < 1:
            raise JobFileError(f"field 'attempt' must be an integer >= 1, got {self.attempt!r}")
        if self.report is not None:
            _path("report", self.report)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; `from_dict` reads it back."""
        p = self.paths
        return {
            "version": JOB_VERSION,
            "command": self.command,
            "settings": self.settings,
            "paths": {
                "store": str(p.store),
                "run_dir": str(p.run_dir),
                "task_dir": str(p.task_dir),
                "out": str(p.out),
                "inputs": {port: str(where) for port, where in sorted(p.inputs.items())},
                "scratch": str(p.scratch),
            },
            "limit_gb": self.limit_gb,
            "timeout_s": self.timeout_s,
            "checkpoints": self.checkpoints,
            "attempt": self.attempt,
            "report": None if self.report is None else str(self.report),
        }

    @classmethod
    def from_dict(cls, data: object) -> CommandSpec:
        """The spec ``data`` describes; `JobFileError` names a missing, unknown or bad field."""
        if not isinstance(data, dict):
            raise JobFileError(f"a job must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - _JOB_FIELDS)
        if unknown:
            raise JobFileError(
                f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_JOB_FIELDS))})"
            )
        version = data.get("version")
        if version != JOB_VERSION:
            raise JobFileError(
                f"field 'version' is {version!r}; this simrun-exec reads version {JOB_VERSION}"
            )
        for name in ("command", "settings", "paths", "limit_gb"):
            if name not in data:
                raise JobFileError(f"field {name!r} is missing")
        raw_paths = data["paths"]
        if not isinstance(raw_paths, dict):
            raise JobFileError(f"field 'paths' must be an object, got {raw_paths!r}")
        known_paths = {*_PATH_FIELDS, "inputs"}
        extra = sorted(set(raw_paths) - known_paths)
        if extra:
            raise JobFileError(f"unknown field 'paths.{extra[0]}'")
        missing = [n for n in (*_PATH_FIELDS, "inputs") if n not in raw_paths]
        if missing:
            raise JobFileError(f"field 'paths.{missing[0]}' is missing")
        raw_inputs = raw_paths["inputs"]
        if not isinstance(raw_inputs, dict):
            raise JobFileError(f"field 'paths.inputs' must be an object, got {raw_inputs!r}")
        inputs: dict[str, Path] = {}
        for port, where in raw_inputs.items():
            problem = _port_name_problem(port)
            if problem is not None:
                raise JobFileError(f"field 'paths.inputs': {problem}")
            inputs[port] = _path(f"paths.inputs.{port}", where)
        paths = TaskPaths(
            **{name: _path(f"paths.{name}", raw_paths[name]) for name in _PATH_FIELDS},
            inputs=inputs,
        )
        report = data.get("report")
        return cls(
            command=data["command"],
            settings=data["settings"],
            paths=paths,
            limit_gb=data["limit_gb"],
            timeout_s=data.get("timeout_s"),
            checkpoints=data.get("checkpoints", False),
            attempt=data.get("attempt", 1),
            report=None if report is None else _path("report", report),
        )


# --- the result ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandResult:
    """What one run of a command came to, as ``simrun-exec`` writes it.

    ``outcome`` is ``done`` (exit code 0), ``failed`` (a non-zero exit, death by a signal
    nobody here sent, or a command that could not start), ``killed`` (its tree passed the
    memory limit, then ``report.killed_for_memory`` is true, or ``simrun-exec`` was told to
    stop) or ``timeout``. ``exit_code`` is None when the command did not exit by itself
    (``signal`` then names the signal that ended it) or never started. ``error`` is empty
    when done; otherwise its first line says why, followed by the end of the command's
    stderr. ``argv`` is None when the template could not be expanded. ``started`` and
    ``finished`` are ISO 8601 UTC times; ``wall_s`` the seconds the command ran.
    """

    outcome: Outcome
    exit_code: int | None
    error: str
    report: WorkerReport
    started: str
    finished: str
    wall_s: float = 0.0
    signal: str | None = None
    argv: tuple[str, ...] | None = None
    attempt: int = 1
    logs: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the command succeeded."""
        return self.outcome == "done"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; `from_dict` reads it back."""
        return {
            "version": RESULT_VERSION,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "error": self.error,
            "report": self.report.to_dict(),
            "started": self.started,
            "finished": self.finished,
            "wall_s": self.wall_s,
            "argv": None if self.argv is None else list(self.argv),
            "attempt": self.attempt,
            "logs": dict(self.logs),
        }

    @classmethod
    def from_dict(cls, data: object) -> CommandResult:
        """The result ``data`` describes; `JobFileError` names a missing or bad field."""
        if not isinstance(data, dict):
            raise JobFileError(f"a result must be a JSON object, got {type(data).__name__}")
        if data.get("version") != RESULT_VERSION:
            raise JobFileError(
                f"result field 'version' is {data.get('version')!r}, expected {RESULT_VERSION}"
            )
        outcome = data.get("outcome")
        if outcome not in OUTCOMES:
            raise JobFileError(f"result field 'outcome' is {outcome!r}, not one of {OUTCOMES}")
        exit_code = data.get("exit_code")
        if exit_code is not None and (
            not isinstance(exit_code, int) or isinstance(exit_code, bool)
        ):
            raise JobFileError(
                f"result field 'exit_code' must be an integer or null, got {exit_code!r}"
            )
        raw_report = data.get("report")
        if not isinstance(raw_report, Mapping):
            raise JobFileError("result field 'report' is missing or not an object")
        try:
            report = WorkerReport.from_dict(raw_report)
        except ValueError as exc:
            raise JobFileError(f"result field 'report': {exc}") from None
        texts = {}
        for name in ("error", "started", "finished"):
            value = data.get(name)
            if not isinstance(value, str):
                raise JobFileError(f"result field {name!r} must be a string, got {value!r}")
            texts[name] = value
        signal = data.get("signal")
        if signal is not None and not isinstance(signal, str):
            raise JobFileError(f"result field 'signal' must be a string or null, got {signal!r}")
        argv = data.get("argv")
        if argv is not None and (
            not isinstance(argv, list) or not all(isinstance(a, str) for a in argv)
        ):
            raise JobFileError("result field 'argv' must be a list of strings or null")
        wall_s = data.get("wall_s", 0.0)
        if not _number(wall_s):
            raise JobFileError(f"result field 'wall_s' must be a number, got {wall_s!r}")
        attempt = data.get("attempt", 1)
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            raise JobFileError(f"result field 'attempt' must be an integer, got {attempt!r}")
        logs = data.get("logs", {})
        if not isinstance(logs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in logs.items()
        ):
            raise JobFileError("result field 'logs' must be an object of strings")
        return cls(
            outcome=cast(Outcome, outcome),
            exit_code=exit_code,
            error=texts["error"],
            report=report,
            started=texts["started"],
            finished=texts["finished"],
            wall_s=float(wall_s),
            signal=signal,
            argv=None if argv is None else tuple(argv),
            attempt=attempt,
            logs=dict(logs),
        )


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
