"""A worker process (``python -m simrun.worker.pool.child``), the only place plugin code
runs: it answers `simrun.worker.pool.protocol` until its stdin closes and, after each request,
ends every process the request left (in its cgroup, else in its tree as a subreaper)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from simrun.core.jobs import JobPaths
from simrun.core.states import exception_names
from simrun.plugins import (
    ENTRY_POINT_GROUP,
    PluginError,
    TaskPaths,
    TaskType,
    load_plugin_ref,
    load_task_types,
    resolve,
)
from simrun.worker.cgroups import Cgroup, parse_oom_kills
from simrun.worker.pool.output import unit_end_marker
from simrun.worker.pool.protocol import (
    MAX_TASKS,
    UnitSlot,
    catalog_message,
    read_blocking,
    write_all,
    write_blocking,
)
from simrun.worker.proctree import anon_memory_bytes, become_subreaper, kill_tree

#: Longest traceback sent back; a longer one keeps its end, where the error is.
MAX_ERROR_CHARS = 20_000


def _error_text() -> str:
    """The traceback of the exception being handled, from the plugin's first frame on (this
    module's frames say nothing to the plugin's author), its end kept when too long."""
    error = sys.exc_info()[1]
    if error is None:
        return traceback.format_exc()
    summary = traceback.TracebackException.from_exception(error)
    frames = list(summary.stack)
    while len(frames) > 1 and frames[0].filename == __file__:
        frames.pop(0)
    summary.stack = traceback.StackSummary.from_list(frames)
    text = "".join(summary.format())
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


def _unknown(op: object) -> None:
    raise ValueError(f"unknown request {op!r}")


#: Seconds the processes a request left behind have to be gone after SIGKILL.
_GONE_WAIT_S = 10.0


class _CgroupFiles:
    """A cgroup's member list and OOM counter, kept open (read after every unit)."""

    def __init__(self, box: Cgroup) -> None:
        self.version = box.version
        events = "memory.events" if box.version == 2 else "memory.oom_control"
        self._procs = self._open(box.path / "cgroup.procs")
        self._events = self._open(box.path / events)

    @staticmethod
    def _open(path: Path) -> int | None:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    @staticmethod
    def _read(fd: int | None) -> str | None:
        if fd is None:
            return None
        try:
            return os.pread(fd, 65536, 0).decode()
        except OSError:
            return None

    def pids(self) -> list[int] | None:
        text = self._read(self._procs)
        return None if text is None else [int(x) for x in text.split()]

    def oom_kills(self) -> int | None:
        text = self._read(self._events)
        if text is None:
            return None
        return parse_oom_kills(text)


class Leftovers:
    """Ends what a request left behind; tells when the kernel OOM-killed one of them."""

    def __init__(self, box: Cgroup | None) -> None:
        self.box = box
        self.pid = os.getpid()
        self._files = _CgroupFiles(box) if box is not None else None
        self._oom = self._oom_kills()

    def _oom_kills(self) -> int | None:
        if self.box is None or self._files is None:
            return None
        found = self._files.oom_kills()
        return found if found is not None else self.box.oom_kills()

    def end(self) -> bool:
        """Kill and reap every process left; whether the kernel OOM-killed one since."""
        if self.box is not None:
            pids = self._files.pids() if self._files is not None else None
            if pids is None or any(p != self.pid for p in pids):
                self.box.kill_all(spare=self.pid, timeout_s=_GONE_WAIT_S)
        else:
            kill_tree(self.pid, include_root=False)
        self._reap()
        if self.box is None:
            return False
        before, self._oom = self._oom, self._oom_kills()
        return before is not None and self._oom is not None and self._oom > before

    def _reap(self) -> None:
        """Reap the children this process adopted or started (all killed by now)."""
        deadline = time.monotonic() + _GONE_WAIT_S
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # no child left
                return
            if pid == 0:  # children left, not ended yet
                time.sleep(0.001)


def _flush() -> None:
    """Push what plugin code printed out of Python's buffers, before the reply."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _end_output(index: int) -> None:
    """Mark the end of unit ``index``'s output in the pipe, after its last (flushed) byte."""
    with contextlib.suppress(OSError):
        write_all(2, unit_end_marker(index))


def _timed(call: Callable[[], None], leftovers: Leftovers | None = None) -> dict[str, Any]:
    """Run ``call``: the reply with its wall time (and traceback), once what it left behind
    is ended (``oom_kill`` when the kernel killed one)."""
    start = time.perf_counter()
    try:
        call()
    except Exception as exc:  # noqa: BLE001  # plugin errors go back to the container as text
        reply = {
            "ok": False,
            "seconds": time.perf_counter() - start,
            "error": _error_text(),
            "exception": list(exception_names(type(exc))),
        }
    else:
        reply = {"ok": True, "seconds": time.perf_counter() - start, "error": None}
    _flush()
    if leftovers is not None and leftovers.end():
        reply["oom_kill"] = True
    return reply


@dataclass
class _Context:
    """The task a process is working on."""

    key: tuple[str, str]
    task_type: TaskType
    settings: BaseModel
    paths: TaskPaths
    set_up: bool = False


class Child:
    """One worker process's task types, the tasks it set up, and the current one."""

    def __init__(
        self,
        registry: dict[str, TaskType],
        leftovers: Leftovers | None = None,
        slot: UnitSlot | None = None,
    ) -> None:
        self.registry = registry
        self.leftovers = leftovers
        self.slot = slot
        self.context: _Context | None = None
        self._tasks: dict[tuple[str, str], _Context] = {}
        self._functions: dict[str, Callable[..., Any]] = {}

    def task_type(self, name: str) -> TaskType:
        if name not in self.registry:
            installed = list(entry_points(group=ENTRY_POINT_GROUP))
            eps = [ep for ep in installed if ep.name == name]
            if not eps:
                known = sorted({*self.registry, *(ep.name for ep in installed)})
                raise PluginError(
                    f"task type {name!r} is not installed on this worker "
                    f"(known: {', '.join(known) or 'none'})"
                )
            self.registry[name] = load_task_types(eps)[name]
        return self.registry[name]

    def function(self, ref: str) -> Callable[..., Any]:
        func = self._functions.get(ref)
        if func is None:
            func = self._functions[ref] = resolve(ref)
        return func

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """The one reply to a "task" or "merge" request."""
        op = message.get("op")
        if op == "task":
            return _timed(functools.partial(self._task, message), self.leftovers)
        if op == "merge":
            return _timed(self._merge, self.leftovers)
        return _timed(functools.partial(_unknown, op))

    def _mark(self, batch: int, pos: int, done_s: float) -> None:
        if self.slot is not None:
            self.slot.write(batch, pos, time.monotonic(), done_s)

    def units(self, message: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The messages answering a "units" request (`simrun.worker.pool.protocol`)."""
        indices = message.get("indices")
        if not isinstance(indices, list) or not all(type(i) is int for i in indices):
            reply = _timed(functools.partial(_unknown, f"units with indices {indices!r}"))
            yield {**reply, "index": None, "units": [], "end": True}
            return
        batch = message.get("batch")
        batch = batch if type(batch) is int else 0
        done_s = 0.0
        outcomes: list[list[Any]] = []
        for pos, index in enumerate(indices):
            self._mark(batch, pos, done_s)
            reply = _timed(functools.partial(self._unit, index), self.leftovers)
            if reply.get("oom_kill"):  # the container kills this process: the batch ends
                yield {"units": outcomes, "oom_kill": index, "end": True}
                return
            _end_output(index)
            outcomes.append(
                [index, reply["ok"], reply["seconds"], reply["error"], reply.get("exception", [])]
            )
            if reply["ok"]:
                done_s += reply["seconds"]
            else:  # sent before the slot moves on: an unsent unit past the slot ended well
                yield {"units": outcomes, "end": False}
                outcomes = []
            self._mark(batch, pos + 1, done_s)
        yield {"units": outcomes, "end": True}

    def _task(self, message: dict[str, Any]) -> None:
        key = (str(message["run"]), str(message["task"]))
        self.context = None
        current = self._tasks.pop(key, None)
        if current is None:
            task_type = self.task_type(str(message["task_type"]))
            paths = JobPaths.model_validate(message["paths"]).task_paths()
            settings = task_type.settings.model_validate(message["settings"])
            current = _Context(key, task_type, settings, paths)
        self._tasks[key] = current  # most recent last
        while len(self._tasks) > MAX_TASKS:
            del self._tasks[next(iter(self._tasks))]
        # the task's scratch exists before its setup and each of its units (`_unit`)
        current.paths.scratch.mkdir(parents=True, exist_ok=True)
        if message.get("setup") and not current.set_up:
            current.paths.out.mkdir(parents=True, exist_ok=True)
            if current.task_type.setup is not None:
                self.function(current.task_type.setup)(current.settings, current.paths)
            current.set_up = True
        self.context = current

    def _current(self) -> _Context:
        if self.context is None:
            raise RuntimeError("no task was given before this request")
        return self.context

    def _unit(self, index: int) -> None:
        ctx = self._current()
        if ctx.task_type.compute_unit is None:
            raise PluginError(f"task type {ctx.task_type.name!r} has no compute_unit")
        ctx.paths.scratch.mkdir(parents=True, exist_ok=True)
        checkpoint = ctx.paths.checkpoint(index) if ctx.task_type.checkpoints else None
        if checkpoint is not None:
            checkpoint.mkdir(parents=True, exist_ok=True)
        self.function(ctx.task_type.compute_unit)(ctx.settings, index, ctx.paths)
        if checkpoint is not None:  # the unit is done: nothing to resume any more
            shutil.rmtree(checkpoint, ignore_errors=True)

    def _merge(self) -> None:
        ctx = self._current()
        if ctx.task_type.merge is None:
            return  # a type without a merge has nothing to merge
        ctx.paths.out.mkdir(parents=True, exist_ok=True)
        self.function(ctx.task_type.merge)(ctx.settings, ctx.paths)


def catalog(registry: dict[str, TaskType]) -> dict[str, tuple[str | None, str | None]]:
    """Every task type installed here (entry points, then ``--plugin`` ones over them): its
    command template, or why it cannot be loaded (one broken type spoils no other)."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in registry:
            continue
        try:
            found[ep.name] = (load_task_types([ep])[ep.name].command, None)
        except (PluginError, ValueError) as exc:
            found[ep.name] = (None, str(exc))
    for name, task_type in registry.items():
        found[name] = (task_type.command, None)
    return dict(sorted(found.items()))


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the worker container dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simrun.worker.pool.child")
    parser.add_argument("--plugin", action="append", default=[])
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--cuda-visible-devices", default=None)
    parser.add_argument("--cgroup", default=None, help="the cgroup directory to join first")
    parser.add_argument("--cgroup-version", type=int, default=1, choices=(1, 2))
    parser.add_argument("--slot-fd", type=int, default=None, help="the fd of the UnitSlot")
    parser.add_argument(
        "--catalog", action="store_true", help="write the installed task types and end"
    )
    args = parser.parse_args(argv)
    box = None
    if args.cgroup is not None:  # before anything else runs, so that nothing escapes it
        box = Cgroup(Path(args.cgroup), args.cgroup_version)
        try:
            box.join(os.getpid())
        except OSError as exc:
            hello = {"ok": False, "pid": os.getpid(), "error": f"cannot join {box}: {exc}"}
            write_blocking(1, hello)
            return 2
    become_subreaper()
    _die_with_parent()
    # Ctrl-C reaches the whole process group; the container decides when processes stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol keeps the real stdout; whatever plugins print goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = 0
    if args.cuda_visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = args.cuda_visible_devices
    for entry in reversed(args.path):
        if entry not in sys.path:
            sys.path.insert(0, entry)

    registry: dict[str, TaskType] = {}
    try:
        for ref in args.plugin:
            task_type = load_plugin_ref(ref)
            registry[task_type.name] = task_type
    except PluginError as exc:
        write_blocking(out_fd, {"ok": False, "pid": os.getpid(), "error": str(exc)})
        return 2
    if args.catalog:
        write_blocking(out_fd, catalog_message(catalog(registry)))
        return 0
    # What every fresh process holds, plugins loaded: the pool counts what tasks keep beyond.
    baseline_bytes = anon_memory_bytes(os.getpid()) or 0
    hello = {"ok": True, "pid": os.getpid(), "error": None, "baseline_bytes": baseline_bytes}
    write_blocking(out_fd, hello)

    slot = None
    if args.slot_fd is not None:
        slot = UnitSlot(args.slot_fd)
        os.close(args.slot_fd)
    child = Child(registry, Leftovers(box), slot)
    while True:
        message = read_blocking(in_fd)
        if message is None:
            return 0
        if message.get("op") == "units":
            for reply in child.units(message):
                write_blocking(out_fd, reply)
        else:
            write_blocking(out_fd, child.handle(message))


if __name__ == "__main__":
    sys.exit(main())
