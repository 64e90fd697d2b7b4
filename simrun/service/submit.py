"""Turning a checked workflow into a run: its id, its tasks with their input paths, and the
copy of its sources; a write that finds its volume full (`NoSpace`, `space_line`); what a
submission killed midway left (`Leftovers`: its upload directory, a run directory without
a run)."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simrun.core.layout import InputRef, StoreLayout
from simrun.core.reuse import forced_tasks, rerun_problems, task_all_fingerprints
from simrun.core.wire import RUN_ID
from simrun.errors import SimrunError
from simrun.plugins import TaskType
from simrun.runstore.rows import NewRun, NewTask
from simrun.workflow import Problem, Workflow, WorkflowError

#: Below this many free bytes a volume of the service counts as full.
LOW_SPACE_BYTES = 1024 * 1024
#: SQLite's result codes of a write that found no room: SQLITE_FULL, and the shared memory
#: file that could not grow (SQLITE_IOERR_SHMSIZE).
SQLITE_NO_ROOM = frozenset({13, 4874})


class NoSpace(SimrunError, OSError):
    """A write of the service found its volume full: nothing of it was kept; the message
    names the volume, where it is mounted and its free bytes, in one line."""


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a write that found no room: ENOSPC
    or EDQUOT, SQLite's "database or disk is full"."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, NoSpace):
            return True
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(seen, sqlite3.Error) and seen.sqlite_errorcode in SQLITE_NO_ROOM:
            return True
        seen = seen.__cause__
    return False


@dataclass(frozen=True)
class Volume:
    """A directory the service writes to, by what it is to the user ("the store")."""

    what: str
    path: Path


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: Path) -> Path:
    """The mount point of the volume ``path`` (or its nearest existing parent) is on."""
    found = _existing(path).resolve()
    while not os.path.ismount(found) and found != found.parent:
        found = found.parent
    return found


def free_space(path: Path) -> tuple[int, bool]:
    """The bytes an unprivileged write may still take on the volume of ``path``, and
    whether it has a free inode (a volume without inode counts has)."""
    stat = os.statvfs(_existing(path))
    return stat.f_bavail * stat.f_frsize, not stat.f_files or stat.f_favail > 0


def _room(path: Path) -> int:
    """The free bytes of ``path``'s volume, 0 without a free inode."""
    free, inodes = free_space(path)
    return free if inodes else 0


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count:,} bytes ({count / scale:.1f} {unit})"
    return f"{count:,} bytes"


def space_line(volume: Volume) -> str:
    """One line naming ``volume``: where it is mounted and its free bytes (blocking)."""
    free, inodes = free_space(volume.path)
    return (
        f"{volume.what} {volume.path} is on the volume mounted at {mount_point(volume.path)}, "
        f"with {_size(free)} free{'' if inodes else ' but no free inode'}"
    )


def full_volume(exc: BaseException, volumes: Sequence[Volume]) -> Volume:
    """The volume of ``volumes`` that ``exc`` (a write that found no room) hit: the one of
    its file name (a copy's target: ``filename2``), else the one with the least free bytes
    (blocking)."""
    for name in (getattr(exc, "filename2", None), getattr(exc, "filename", None)):
        if not isinstance(name, str):
            continue
        for volume in volumes:
            if Path(name).absolute().is_relative_to(volume.path.absolute()):
                return volume
        break  # the file that took no more is elsewhere: see where space is short
    return min(volumes, key=lambda v: _room(v.path))


def low_space(volumes: Sequence[Volume]) -> str | None:
    """The line of the first of ``volumes`` below `LOW_SPACE_BYTES` free (or without a
    free inode), or None (blocking)."""
    for volume in volumes:
        if _room(volume.path) < LOW_SPACE_BYTES:
            return f"no space left: {space_line(volume)}"
    return None


def new_run_id(now_s: float | None = None, token: str | None = None) -> str:
    """A run id that sorts by submission time: ``20250101-120000-1a2b3c``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
    return f"{stamp}-{token or secrets.token_hex(3)}"


def source_copy(layout: StoreLayout, run: str, name: str, original: Path) -> Path:
    """Where the copy of source ``name`` of run ``run`` lives."""
    return layout.sources(run) / name / original.name


def input_path(layout: StoreLayout, run: str, ref: str, sources: Mapping[str, Path]) -> Path:
    """The path an input reference reads: a source's directory or an upstream output."""
    parsed = InputRef.parse(ref)
    if parsed is None:
        raise ValueError(f"input {ref!r} is neither 'task.port' nor 'source:name'")
    if parsed.kind == "source":
        return source_copy(layout, run, parsed.name, sources[parsed.name]).parent
    out = layout.task_out(run, parsed.name)
    return out if parsed.port == "out" else out / parsed.port


def plan_run(
    run_id: str,
    doc: Workflow,
    settings_by_task: Mapping[str, dict[str, Any]],
    types: Mapping[str, TaskType],
    layout: StoreLayout,
    sources: Mapping[str, Path],
    text: str,
    created_s: float,
    *,
    reuse: bool = True,
    rerun: Sequence[str] = (),
    environment_image: str | None = None,
) -> NewRun:
    """The run to store for a checked document, each task with its fingerprint and whether
    it may reuse earlier work (blocking: sources are hashed)."""
    problems = [
        Problem(("tasks", i, "type"), f"task type {spec.type!r} is not installed", task=spec.name)
        for i, spec in enumerate(doc.tasks)
        if spec.type not in types
    ] + [
        Problem(("tasks", i, "settings"), "settings were not checked", task=spec.name)
        for i, spec in enumerate(doc.tasks)
        if spec.name not in settings_by_task
    ]
    names = [spec.name for spec in doc.tasks]
    problems += [Problem(("rerun",), why) for why in rerun_problems(names, rerun)]
    if problems:
        raise WorkflowError(problems, "workflow")
    deps = doc.dependencies()
    order = doc.order()
    forced = forced_tasks(deps, rerun, reuse)
    prints, unit_prints = task_all_fingerprints(
        order,
        {
            t.name: (
                doc.in_run_image(types[t.type], environment_image),
                settings_by_task[t.name],
                t.inputs,
            )
            for t in doc.tasks
        },
        sources,
    )
    tasks = []
    for position, name in enumerate(order):
        spec = doc.task(name)
        task_type = types[spec.type]
        tasks.append(
            NewTask(
                name=name,
                type=spec.type,
                position=position,
                settings=dict(settings_by_task[name]),
                inputs={
                    port: str(input_path(layout, run_id, ref, sources))
                    for port, ref in sorted(spec.inputs.items())
                },
                depends=tuple(sorted(deps[name])),
                splittable=task_type.splittable,
                has_merge=task_type.splittable and task_type.merge is not None,
                retry=spec.retry_fields(),
                staged=tuple(sorted(spec.stage)),
                fingerprint=prints[name],
                reuse=name not in forced,
                unit_fingerprint=unit_prints.get(name),
                override=(
                    spec.resources.model_dump(exclude_none=True)
                    if spec.resources is not None
                    else None
                ),
            )
        )
    return NewRun(
        id=run_id,
        name=doc.name,
        model=doc.model,
        document=text,
        tasks=tuple(tasks),
        created_s=created_s,
        image=doc.image if doc.image is not None else environment_image,
    )


def copy_sources(layout: StoreLayout, run: str, sources: Mapping[str, Path]) -> None:
    """Copy every source into the directory of run ``run`` (blocking); the first error is
    raised as it came, its errno kept (a full volume is told from the rest)."""
    for name, original in sources.items():
        target = source_copy(layout, run, name, original)
        target.parent.mkdir(parents=True, exist_ok=True)
        if original.is_dir():
            _copy_tree(original, target)
        else:
            shutil.copy2(original, target)


def _copy_tree(source: Path, target: Path) -> None:
    """Copy the directory ``source`` to the new ``target`` (links followed, as
    `shutil.copytree`), stopping at the first error: copytree goes on past a full volume,
    file after file, and gathers the errors as text."""
    target.mkdir()
    for entry in sorted(source.iterdir()):
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        else:
            shutil.copy2(entry, target / entry.name)
    shutil.copystat(source, target)


def remove_run_dir(run_dir: Path) -> None:
    """Remove what a submission that failed had written (blocking)."""
    shutil.rmtree(run_dir, ignore_errors=True)


#: The prefix of the directory a submission's uploads are written to (`upload_staging`).
UPLOAD_PREFIX = "simrun-upload-"
#: Seconds since its last write after which an upload directory is a leftover: a
#: submission writes its uploads, then copies them into the store, then removes it.
UPLOAD_LEFTOVER_S = 300.0
#: Seconds since its last write after which a run directory without a run is a leftover
#: (a submission of another process may be copying its sources meanwhile).
RUN_LEFTOVER_S = 60.0


def upload_staging() -> Path:
    """Where a submission's uploads are written before they are copied into the store."""
    return Path(tempfile.gettempdir())


def new_upload_dir() -> Path:
    """A new directory for the uploads of one submission (blocking)."""
    return Path(tempfile.mkdtemp(prefix=UPLOAD_PREFIX, dir=upload_staging()))


def _last_write_s(path: Path) -> float:
    """The latest modification time of ``path`` and everything under it (no link followed;
    what vanishes meanwhile is passed over)."""
    latest = path.lstat().st_mtime
    for parent, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                latest = max(latest, os.lstat(os.path.join(parent, name)).st_mtime)
            except FileNotFoundError:
                continue
    return latest


def _bytes_under(path: Path) -> int:
    total = 0
    for parent, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except FileNotFoundError:
                continue
    return total


@dataclass
class Leftovers:
    """What submissions killed midway left and a start removed: upload directories and run
    directories without a run, their bytes, and those that could not go (with why)."""

    uploads: int = 0
    runs: int = 0
    bytes: int = 0
    kept: list[str] = field(default_factory=list)

    def line(self, staging: Path, runs: Path) -> str:
        """The one log line of a sweep that found something."""
        line = (
            f"removed what interrupted submissions left: {self.uploads} upload "
            f"director{'y' if self.uploads == 1 else 'ies'} in {staging}, {self.runs} run "
            f"director{'y' if self.runs == 1 else 'ies'} without a run in {runs}, "
            f"{_size(self.bytes)}"
        )
        return line + (f"; could not remove {'; '.join(self.kept)}" if self.kept else "")


def upload_leftovers(staging: Path, now_s: float) -> list[Path]:
    """This user's upload directories in ``staging`` written to last `UPLOAD_LEFTOVER_S`
    ago or more (blocking)."""
    found = []
    for path in sorted(staging.glob(f"{UPLOAD_PREFIX}*")):
        try:
            if path.is_symlink() or not path.is_dir() or path.lstat().st_uid != os.getuid():
                continue
            if now_s - _last_write_s(path) >= UPLOAD_LEFTOVER_S:
                found.append(path)
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def run_dir_names(layout: StoreLayout) -> list[str]:
    """The directories under the store's ``runs/`` named as a run id (blocking)."""
    if not layout.runs.is_dir():
        return []
    return sorted(
        p.name
        for p in layout.runs.iterdir()
        if RUN_ID.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    )


def stale_run_dirs(layout: StoreLayout, names: Sequence[str], now_s: float) -> list[Path]:
    """Those of the run directories ``names`` written to last `RUN_LEFTOVER_S` ago or more
    (blocking)."""
    found = []
    for name in names:
        path = layout.run_dir(name)
        try:
            if now_s - _last_write_s(path) >= RUN_LEFTOVER_S:
                found.append(path)
        except OSError:
            continue  # gone meanwhile
    return found


def remove_leftovers(uploads: Sequence[Path], runs: Sequence[Path]) -> Leftovers:
    """Remove ``uploads`` and ``runs`` (blocking): what went, and what could not."""
    done = Leftovers()
    for path, is_run in [*((p, False) for p in uploads), *((p, True) for p in runs)]:
        size = _bytes_under(path)
        try:
            shutil.rmtree(path)
        except OSError as exc:
            done.kept.append(f"{path}: {exc}")
            continue
        done.bytes += size
        if is_run:
            done.runs += 1
        else:
            done.uploads += 1
    return done
