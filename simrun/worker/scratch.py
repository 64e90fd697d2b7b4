"""The local scratch of tasks on a worker's own disk (``<scratch dir>/<worker id>/<run>/<task>``):
staged input ports copied there once per task, measured while jobs run, removed when the
task ended or stayed idle long."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from simrun.core.jobs import JobPaths, JobSpec
from simrun.core.sizing import GIB, SLACK_GB

log = logging.getLogger(__name__)

#: A task whose scratch passes its ``scratch_gb`` times this (at least `HARD_MARGIN_MIN_GB`
#: more) has its job stopped; below, it is only reported.
HARD_MARGIN = 1.5
HARD_MARGIN_MIN_GB = 0.25
#: The scratch of a task with no job here for this long goes (a failed task never ends).
IDLE_REMOVE_S = 3600.0
#: The prefix of a copy being made (never read by a task).
_PARTIAL = ".staging-"


def scratch_root(directory: Path, worker_id: str) -> Path:
    """The scratch root of worker ``worker_id`` in the (shared) scratch directory."""
    return directory / worker_id.replace("/", "_").replace("\0", "_")


def scratch_limit_gb(asked_gb: float) -> float:
    """The scratch (GiB) past which a task asking for ``asked_gb`` has its job stopped."""
    return max(asked_gb * HARD_MARGIN, asked_gb + HARD_MARGIN_MIN_GB)


def scratch_admission(
    need_gb: float, free_gb: float | None, held_task_gb: float, held_all_gb: float
) -> Literal["run", "wait", "refuse"]:
    """Whether a job whose task asks for ``need_gb`` of scratch may start now, once other
    tasks' scratch is freed, or never; ``held_*``: its task's and every task's scratch here."""
    if need_gb <= 0 or free_gb is None:
        return "run"
    if need_gb <= free_gb + held_task_gb + SLACK_GB:
        return "run"
    if need_gb <= free_gb + held_all_gb + SLACK_GB:
        return "wait"
    return "refuse"


def room_gb(free_gb: float | None, held_all_gb: float) -> float | None:
    """The scratch a worker advertises: free, and held by tasks (freed when they end)."""
    return None if free_gb is None else free_gb + held_all_gb


@dataclass(frozen=True)
class Staged:
    """Bytes copied and seconds taken by the staging of one job."""

    bytes: int = 0
    seconds: float = 0.0


def usage_bytes(directory: Path, skip: Iterable[str] = ()) -> int:
    """The bytes of the files under ``directory`` (no links followed), ``skip`` left out."""
    total = 0
    skipped = set(skip)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if entry.name in skipped or entry.name.startswith(_PARTIAL):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                total += usage_bytes(Path(entry.path))
            else:
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def _copy(source: Path, target: Path) -> int:
    """Copy a file or directory through a temporary name; the bytes copied (blocking)."""
    partial = target.with_name(_PARTIAL + target.name)
    if partial.exists():
        shutil.rmtree(partial) if partial.is_dir() else partial.unlink()
    if source.is_dir():
        shutil.copytree(source, partial, symlinks=False)
    else:
        shutil.copy2(source, partial)
    size = usage_bytes(partial) if partial.is_dir() else partial.stat().st_size
    os.replace(partial, target)
    return size


@dataclass
class ScratchSpace:
    """The local scratch directories of one worker container, under ``root``."""

    root: Path
    #: One lock per task: its staging happens once however many jobs arrive together.
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    #: The jobs running now per task with a directory here, and when the last one ended.
    _active: dict[tuple[str, str], int] = field(default_factory=dict)
    _last: dict[tuple[str, str], float] = field(default_factory=dict)

    def task_dir(self, run: str, task: str) -> Path:
        """The local scratch of a task (its names checked by the service)."""
        return self.root / run / task

    def free_gb(self) -> float | None:
        """Free space of the scratch file system in GiB (None: unknown)."""
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True)
            return shutil.disk_usage(self.root).free / GIB
        return None

    def localize(self, spec: JobSpec) -> JobSpec:
        """``spec`` with its scratch on this worker and its staged ports read from there."""
        local = self.task_dir(spec.run, spec.task)
        paths = spec.paths
        inputs = {
            port: str(local / port) if port in spec.staged else where
            for port, where in paths.inputs.items()
        }
        new = JobPaths.model_construct(
            **{**paths.model_dump(), "scratch": str(local), "inputs": inputs}
        )
        return spec.model_copy(update={"paths": new})

    async def prepare(self, spec: JobSpec) -> Staged:
        """Make the task's scratch and stage its inputs there once per task (``spec`` as sent);
        what this call copied. The job counts as running here until `end`."""
        key = (spec.run, spec.task)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            self._active[key] = self._active.get(key, 0) + 1
            try:
                return await asyncio.to_thread(self._prepare, spec)
            except BaseException:
                self.end(spec)
                raise

    def _prepare(self, spec: JobSpec) -> Staged:
        local = self.task_dir(spec.run, spec.task)
        local.mkdir(parents=True, exist_ok=True)
        copied, start = 0, time.monotonic()
        for port in spec.staged:
            target = local / port
            if target.exists():
                continue
            copied += _copy(Path(spec.paths.inputs[port]), target)
        if copied == 0:
            return Staged()
        seconds = time.monotonic() - start
        log.info(
            "staged %s of task %s/%s: %d bytes in %.2f s",
            ", ".join(spec.staged), spec.run, spec.task, copied, seconds,
        )  # fmt: skip
        return Staged(copied, seconds)

    async def remove_dead(self, alive: Callable[[list[str]], Awaitable[set[str]]]) -> int:
        """Remove the directories of the other workers ``alive`` does not list; how many."""
        parent = self.root.parent
        try:
            others = [p.name for p in parent.iterdir() if p.is_dir() and p != self.root]
        except OSError:
            return 0
        if not others:
            return 0
        dead = sorted(set(others) - await alive(others))
        for name in dead:
            await asyncio.to_thread(shutil.rmtree, parent / name, True)
        return len(dead)

    def held_bytes(self) -> int:
        """What every task's scratch here holds (staged copies included)."""
        return usage_bytes(self.root)

    def used_bytes(self, spec: JobSpec) -> int:
        """What the task wrote into its scratch here, its staged copies left out."""
        return usage_bytes(self.task_dir(spec.run, spec.task), spec.staged)

    def end(self, spec: JobSpec) -> None:
        """A job of the task that `prepare` began ended here."""
        key = (spec.run, spec.task)
        self._active[key] = max(0, self._active.get(key, 0) - 1)
        self._last[key] = time.monotonic()

    async def sweep(
        self, ended: Callable[[list[tuple[str, str]]], Awaitable[set[tuple[str, str]]]]
    ) -> int:
        """Remove the scratch of idle tasks that ``ended`` says ended (or idle long); how many."""
        idle = [key for key, n in self._active.items() if n == 0]
        if not idle:
            return 0
        now = time.monotonic()
        gone = await ended(idle) | {k for k in idle if now - self._last.get(k, now) > IDLE_REMOVE_S}
        removed = 0
        for key in gone:
            lock = self._locks.setdefault(key, asyncio.Lock())
            async with lock:
                if self._active.get(key, 0) > 0:
                    continue  # a job came meanwhile
                await asyncio.to_thread(self._remove, *key)
                self._active.pop(key, None)
                self._last.pop(key, None)
                removed += 1
            self._locks.pop(key, None)
        return removed

    def _remove(self, run: str, task: str) -> None:
        directory = self.task_dir(run, task)
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove the scratch directory %s: %s", directory, exc)
        with contextlib.suppress(OSError):
            directory.parent.rmdir()  # the run's directory, once empty
