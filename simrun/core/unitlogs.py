"""The kept logs of a task's units under ``<task>/logs/units/`` (what a unit printed, capped,
and its `UnitLogHeader`; the merge's and the command's attempts alike), written whole
(`write_atomic`), only for a unit that printed or did not end well."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import TypeAdapter, ValidationError

from simrun.core.layout import StoreLayout, task_logs
from simrun.errors import SimrunError

_NAME = re.compile(r"^(unit-(?P<index>\d+)|(?P<word>merge|command))\.attempt-(?P<n>\d+)\.json$")
#: The outcomes that say a unit did not end well.
FAILED = frozenset({"failed", "killed", "timeout"})


def unit_stem(unit: int | str) -> str:
    """``unit-<index>`` for a unit of a chunk, else the unit's word (merge, command)."""
    return f"unit-{unit}" if isinstance(unit, int) else unit


def parse_unit(text: str) -> int | str:
    """A unit as a user names it (``7``, ``merge``, ``command``); ValueError otherwise."""
    if text.isdigit():
        return int(text)
    if text in ("merge", "command"):
        return text
    raise ValueError(f"unit {text!r} is not an index (an integer >= 0), 'merge' or 'command'")


def units_dir(task_logs: Path) -> Path:
    return task_logs / "units"


def command_log_paths(task_logs: Path, attempt: int) -> tuple[Path, Path]:
    """Where a command's attempt writes its stdout and its stderr."""
    return task_logs / f"attempt-{attempt}.out", task_logs / f"attempt-{attempt}.err"


def attempt_paths(task_logs: Path, unit: int | str, attempt: int) -> tuple[Path, Path]:
    """The header (.json) and the output (.log) of ``unit``'s attempt ``attempt``."""
    base = f"{unit_stem(unit)}.attempt-{attempt}"
    return units_dir(task_logs) / f"{base}.json", units_dir(task_logs) / f"{base}.log"


class _Wire:
    """A dataclass that goes over the wire as JSON data (`to_dict`, `from_dict`)."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _adapter(type(self)).dump_python(self, mode="json")
        return data

    @classmethod
    def from_dict(cls, data: object, where: str) -> Self:
        """The value in ``data`` (`to_dict`'s form); ValueError naming ``where``."""
        try:
            found: Self = _adapter(cls).validate_python(data)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            at = ".".join(str(part) for part in error["loc"])
            raise ValueError(f"{where}: not {cls.WHAT} ({at}: {error['msg']})") from None
        return found

    WHAT: ClassVar[str]


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


@dataclass(frozen=True)
class UnitLogHeader(_Wire):
    """What is known of one attempt of a unit: who ran it, how it ended, its seconds, the
    job's peak memory and limit (GiB), when the job ran (epoch seconds), its output bytes."""

    run: str
    task: str
    unit: int | str
    attempt: int
    job_id: str
    worker: str
    pid: int | None
    outcome: str
    error: str | None
    seconds: float | None
    peak_gb: float
    limit_gb: float
    started: float
    finished: float
    output_bytes: int = 0

    WHAT = "a unit log header"

    @classmethod
    def from_dict(cls, data: object, where: str) -> UnitLogHeader:
        """The header in ``data``; ValueError naming ``where`` and what it lacks."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: not a unit log header (a JSON object)")
        missing = sorted({f.name for f in fields(cls)} - {"output_bytes"} - set(data))
        if missing:
            raise ValueError(f"{where}: not a unit log header (no {', '.join(missing)})")
        return super().from_dict(data, where)


def write_atomic(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary name in the same directory (flushed
    to disk first with ``sync``), so a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class UnitAttempt(_Wire):
    """One attempt of a unit as read: its header and output (a command's: both streams)."""

    WHAT = "a unit's attempt"

    header: UnitLogHeader
    output: str
    log_paths: tuple[Path, ...]


@dataclass(frozen=True)
class UnitLogs(_Wire):
    """A unit's attempts with a log, first attempt first."""

    WHAT = "the logs of a unit"

    run: str
    task: str
    unit: int | str
    attempts: tuple[UnitAttempt, ...]


class LogNotFound(SimrunError, LookupError):
    """A run, task, unit or attempt without logs; the message says which, in one line."""


def _task_logs(root: Path, run: str, task: str | None) -> dict[str, Path]:
    """The logs directory of each task of run ``run`` (only ``task`` when given);
    `LogNotFound` for an unknown run or task."""
    run_dir = StoreLayout(root).run_dir(run)
    if not run_dir.is_dir():
        raise LogNotFound(f"there is no run {run!r} in the store {root}")
    names = sorted(p.name for p in run_dir.iterdir() if p.is_dir() and p.name != "sources")
    if task is not None and task not in names:
        known = ", ".join(names) or "none has started"
        raise LogNotFound(f"run {run!r} has no task {task!r} with files (its tasks: {known})")
    layout = StoreLayout(root)
    return {name: task_logs(layout.task_dir(run, name)) for name in names if task in (None, name)}


def run_logs(root: Path, run: str, task: str | None = None) -> dict[str, list[UnitLogHeader]]:
    """The last attempt of every unit with a log, per task of run ``run``."""
    return {name: list_unit_logs(logs) for name, logs in _task_logs(root, run, task).items()}


def store_unit_logs(
    root: Path, run: str, task: str, unit: int | str, attempt: int | None = None
) -> UnitLogs:
    """`read_unit_logs` of a unit of the store at ``root``; `LogNotFound` in one line."""
    logs = _task_logs(root, run, task)[task]
    found = read_unit_logs(logs, run, task, unit)
    what = f"unit {unit} of task {task!r} of run {run!r}"
    if not found.attempts:
        if _output_files(logs, unit):
            raise LogNotFound(
                f"{what} is running: its log is written as it goes (--follow prints it as it comes)"
            )
        raise LogNotFound(
            f"{what} has no log (a unit keeps one when it printed something or did not end "
            "well; see `simrun logs RUN TASK` for the units that have one)"
        )
    if attempt is not None:
        kept = tuple(a for a in found.attempts if a.header.attempt == attempt)
        if not kept:
            have = ", ".join(str(a.header.attempt) for a in found.attempts)
            raise LogNotFound(f"{what} has no log of attempt {attempt} (attempts with one: {have})")
        found = UnitLogs(run, task, unit, kept)
    return found


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _command_output(task_logs: Path, attempt: int) -> tuple[str, tuple[Path, ...]]:
    parts, paths = [], []
    for name, path in zip(("stdout", "stderr"), command_log_paths(task_logs, attempt), strict=True):
        if path.is_file():
            paths.append(path)
            text = _read_text(path)
            if text:
                parts.append(f"--- {name} ({path.name}) ---\n{text}")
    return "".join(parts), tuple(paths)


def read_unit_logs(
    task_logs: Path, run: str, task: str, unit: int | str, attempt: int | None = None
) -> UnitLogs:
    """The attempts of ``unit`` (only ``attempt`` when given) with a header, in order."""
    found: list[UnitAttempt] = []
    for n, header_path in _unit_headers(task_logs, unit).items():
        if attempt is not None and n != attempt:
            continue
        header = _read_header(header_path)
        if unit == "command":
            output, paths = _command_output(task_logs, n)
        else:
            log = attempt_paths(task_logs, unit, n)[1]
            output = _read_text(log) if log.is_file() else ""
            paths = (log,) if log.is_file() else ()
        found.append(UnitAttempt(header, output, paths))
    found.sort(key=lambda a: a.header.attempt)
    return UnitLogs(run, task, unit, tuple(found))


def _read_header(path: Path) -> UnitLogHeader:
    return UnitLogHeader.from_dict(json.loads(path.read_text()), str(path))


def _unit_headers(task_logs: Path, unit: int | str) -> dict[int, Path]:
    """The header files of ``unit``, by attempt."""
    wanted = unit_stem(unit)
    found: dict[int, Path] = {}
    for path in _headers(task_logs):
        match = _NAME.match(path.name)
        assert match is not None
        if (match["word"] or f"unit-{match['index']}") == wanted:
            found[int(match["n"])] = path
    return found


def _headers(task_logs: Path) -> list[Path]:
    directory = units_dir(task_logs)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def list_unit_logs(task_logs: Path) -> list[UnitLogHeader]:
    """The last attempt of each unit of a task with a log, failures first."""
    last: dict[int | str, UnitLogHeader] = {}
    for path in _headers(task_logs):
        try:
            header = _read_header(path)
        except (OSError, ValueError):
            continue  # a header being replaced, or not ours: the listing goes on
        seen = last.get(header.unit)
        if seen is None or header.attempt > seen.attempt:
            last[header.unit] = header
    return sorted(
        last.values(),
        key=lambda h: (h.outcome not in FAILED, isinstance(h.unit, str), str(h.unit).zfill(20)),
    )


#: The most bytes of one file `live_unit_logs` reads at a time.
LIVE_READ_MAX = 256 * 1024
_COMMAND_NAME = re.compile(r"^attempt-(?P<n>\d+)\.(out|err)$")


@dataclass(frozen=True)
class LiveChunk:
    """What one output file of an attempt holds from the offset asked on, and the offset
    to ask from next time (a character cut at the end waits for the next read)."""

    name: str
    offset: int
    text: str


@dataclass(frozen=True)
class LiveAttempt(_Wire):
    """One attempt of a unit as it is now: its new output, and its header once it ended."""

    WHAT = "a unit's live attempt"

    attempt: int
    header: UnitLogHeader | None
    chunks: tuple[LiveChunk, ...]


def whole_utf8(data: bytes) -> int:
    """How many bytes of ``data`` end on a character's end (a UTF-8 sequence cut at the
    end of ``data`` is left for later; bytes that are no UTF-8 at all count as they are)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        if byte & 0x80 == 0 or byte >= 0xF8:  # ASCII, or no lead byte of UTF-8
            return len(data)
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return len(data) if back >= need else len(data) - back
    return len(data)


def _read_from(path: Path, offset: int) -> tuple[int, str] | None:
    """The text of ``path`` from ``offset`` on and the offset after it (None: no file)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(LIVE_READ_MAX)
    except FileNotFoundError:
        return None
    whole = whole_utf8(data)
    return offset + whole, data[:whole].decode("utf-8", errors="replace")


def _output_files(task_logs: Path, unit: int | str) -> dict[int, list[Path]]:
    """The output files of each attempt of ``unit`` there are, by attempt."""
    found: dict[int, list[Path]] = {}
    if unit == "command":
        if task_logs.is_dir():
            for path in sorted(task_logs.iterdir()):
                match = _COMMAND_NAME.match(path.name)
                if match:
                    found.setdefault(int(match["n"]), []).append(path)
        return found
    directory = units_dir(task_logs)
    if directory.is_dir():
        stem = f"{unit_stem(unit)}.attempt-"
        for path in directory.iterdir():
            if path.name.startswith(stem) and path.name.endswith(".log"):
                number = path.name[len(stem) : -len(".log")]
                if number.isdigit():
                    found.setdefault(int(number), []).append(path)
    return found


def live_unit_logs(
    task_logs: Path, unit: int | str, since: Mapping[str, int] | None = None
) -> list[LiveAttempt]:
    """Every attempt of ``unit`` with an output file or a header, first attempt first: what
    its files hold past the offsets of ``since`` (by file name), and its header once it
    ended (read before its output, so that output is whole)."""
    since = since or {}
    headers: dict[int, UnitLogHeader] = {}
    for n, path in _unit_headers(task_logs, unit).items():
        try:
            headers[n] = _read_header(path)
        except (OSError, ValueError):
            continue  # being replaced: the next look finds it
    files = _output_files(task_logs, unit)
    attempts: list[LiveAttempt] = []
    for n in sorted(set(headers) | set(files)):
        chunks = []
        for path in files.get(n, []):
            got = _read_from(path, since.get(path.name, 0))
            if got is not None:
                chunks.append(LiveChunk(path.name, got[0], got[1]))
        attempts.append(LiveAttempt(n, headers.get(n), tuple(chunks)))
    return attempts


def store_live_unit_logs(
    root: Path, run: str, task: str, unit: int | str, since: Mapping[str, int] | None = None
) -> list[LiveAttempt]:
    """`live_unit_logs` of a unit of the store at ``root``; `LogNotFound`: no run."""
    if not StoreLayout(root).run_dir(run).is_dir():
        raise LogNotFound(f"there is no run {run!r} in the store {root}")
    return live_unit_logs(task_logs(StoreLayout(root).task_dir(run, task)), unit, since)
