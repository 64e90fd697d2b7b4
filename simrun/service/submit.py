"""Turning a checked workflow into a run: its id, its tasks with their input paths, and the
copy of its sources; what a submission killed midway left (`Leftovers`: its upload
directory, a run directory without a run)."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simrun.core.layout import InputRef, StoreLayout
from simrun.core.reuse import forced_tasks, rerun_problems, task_all_fingerprints
from simrun.core.wire import RUN_ID
from simrun.plugins import TaskType
from simrun.runstore.rows import NewRun, NewTask
from simrun.service.volumes import bytes_text
from simrun.workflow import Problem, Workflow, WorkflowError


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
            f"{bytes_text(self.bytes)}"
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
