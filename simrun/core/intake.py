"""What the service accepts from its clients (`InputLimits`) and the pure checks that apply
the limits, each refusal naming the option that raises it."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import PurePosixPath

MiB = 2**20

#: The body of every request but ``POST /runs`` (a replay or a cancel is a few bytes).
SMALL_BODY_BYTES = 1 * MiB


@dataclass(frozen=True)
class InputLimits:
    """How much one client request may ask of the service (bytes, files, tasks, units, and
    the time of ``count_units``)."""

    max_request_bytes: int = 512 * MiB
    max_workflow_bytes: int = 2 * MiB
    max_file_bytes: int = 256 * MiB
    max_files: int = 10_000
    max_depth: int = 32
    max_tasks: int = 1000
    max_units_per_task: int = 1_000_000
    max_units_per_run: int = 2_000_000
    count_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in (f.name for f in fields(self) if f.name != "count_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"InputLimits.{name} must be an integer >= 1, got {value!r}")
        if not (math.isfinite(self.count_timeout_s) and self.count_timeout_s > 0):
            raise ValueError(
                f"InputLimits.count_timeout_s must be > 0 seconds, got {self.count_timeout_s!r}"
            )


def _raise(limit: str) -> str:
    """The option and variable that raise the `InputLimits` field ``limit``."""
    return f"(raise it with --{limit.replace('_', '-')} / SIMRUN_{limit.upper()})"


def _size(n: int) -> str:
    """``n`` bytes for people: ``2 MiB``, ``1.5 GiB``, ``300 bytes``."""
    for unit, scale in (("GiB", 2**30), ("MiB", MiB), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def is_submission(method: str, path: str) -> bool:
    """Whether a request is a submission (``POST /runs``), whose body may be large."""
    return method.upper() == "POST" and path.rstrip("/") == "/runs"


def body_limit(method: str, path: str, limits: InputLimits) -> int:
    """The largest body a request may send (small but for a submission)."""
    if is_submission(method, path):
        return limits.max_request_bytes
    return min(SMALL_BODY_BYTES, limits.max_request_bytes)


def body_too_large(limit: int, length: int | None = None, *, submission: bool = True) -> str:
    """The message of a 413: what was sent (if known) and the limit."""
    sent = f" ({_size(length)})" if length is not None else ""
    how = f" {_raise('max_request_bytes')}" if submission else ""
    return f"the request body{sent} is larger than the service accepts: {_size(limit)}{how}"


def tasks_problem(count: int, limits: InputLimits) -> str | None:
    """Why a run of ``count`` tasks is refused, or None."""
    if count > limits.max_tasks:
        return (
            f"the workflow has {count} tasks; a run may have at most {limits.max_tasks} "
            + _raise("max_tasks")
        )
    return None


def workflow_size_problem(size: int, limits: InputLimits) -> str | None:
    """Why a workflow document of ``size`` bytes is refused, or None."""
    if size > limits.max_workflow_bytes:
        return (
            f"the workflow document is {_size(size)}; the most accepted is "
            f"{_size(limits.max_workflow_bytes)} {_raise('max_workflow_bytes')}"
        )
    return None


def unit_count_problem(value: object, type_name: str, limits: InputLimits) -> str | None:
    """Why what ``count_units`` of type ``type_name`` answered cannot be a task's units."""
    if isinstance(value, bool) or not isinstance(value, int):
        return (
            f"count_units of type {type_name!r} returned {type(value).__name__} "
            f"{_short(value)}, not an integer"
        )
    if value < 0:
        return f"count_units of type {type_name!r} returned {value}, a negative count"
    if value > limits.max_units_per_task:
        return (
            f"count_units of type {type_name!r} returned {value} units; a task may have at "
            f"most {limits.max_units_per_task} {_raise('max_units_per_task')}"
        )
    return None


def run_units_problem(started: int, count: int, type_name: str, limits: InputLimits) -> str | None:
    """Why a task of ``count`` units may not start in a run of ``started`` units."""
    if started + count > limits.max_units_per_run:
        return (
            f"type {type_name!r}: {count} units more would make {started + count} units in "
            f"the run; a run may have at most {limits.max_units_per_run} "
            + _raise("max_units_per_run")
        )
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def upload_path_problem(path: str, limits: InputLimits) -> str | None:
    """Why ``path`` cannot name a file of an uploaded directory (relative, POSIX, plain
    parts, not too deep), or None."""
    if not path:
        return "a file has an empty path"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return f"path {path!r} contains a control character"
    if "\\" in path:
        return f"path {path!r} contains a backslash (use '/')"
    if path.startswith("/"):
        return f"path {path!r} is absolute"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"path {path!r} has an empty, '.' or '..' part"
    if any(len(part) > 255 for part in parts):
        return f"path {path!r} has a part longer than 255 characters"
    if len(PurePosixPath(path).parts) - 1 > limits.max_depth:
        return (
            f"path {path!r} is {len(parts) - 1} directories deep; the most accepted is "
            f"{limits.max_depth} {_raise('max_depth')}"
        )
    return None


def file_count_problem(files: int, limits: InputLimits) -> str | None:
    """Why a submission of ``files`` source files is refused, or None."""
    if files > limits.max_files:
        return (
            f"{files} files were sent; a submission may have at most {limits.max_files} "
            + _raise("max_files")
        )
    return None


def file_size_problem(size: int, limits: InputLimits, what: str = "the file") -> str | None:
    """Why ``what`` of ``size`` bytes (decoded) is refused, or None."""
    if size > limits.max_file_bytes:
        return (
            f"{what} is {_size(size)}; the most accepted is {_size(limits.max_file_bytes)} "
            + _raise("max_file_bytes")
        )
    return None


def decoded_size(content_b64: str) -> int:
    """The bytes base64 text decodes to, known before it is decoded."""
    return (len(content_b64) * 3) // 4 - content_b64[-2:].count("=")
