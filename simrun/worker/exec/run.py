"""Running the command of one unsplit task (`CommandRun`): no shell, a session of its own,
bounded by `CommandBounds`, memory sampled, time limited, output capped into
``task_dir/logs/attempt-<N>.{out,err}``; what is left when its first process ends is killed."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from simrun.core.environment import find_program, program_dirs, thread_environment, with_threads
from simrun.core.layout import task_logs
from simrun.core.reports import WorkerReport
from simrun.core.unitlogs import command_log_paths
from simrun.errors import SimrunError
from simrun.plugins import TaskPaths
from simrun.worker import engine as container_engine
from simrun.worker.cgroups import KERNEL_LIMIT_FACTOR
from simrun.worker.exec.argv import expand_argv
from simrun.worker.exec.bounds import CommandBounds
from simrun.worker.exec.spec import (
    CommandOutcome,
    CommandResult,
    CommandSpec,
    utc_now,
    write_json_atomic,
)
from simrun.worker.pool.output import CappedSegment, copy_capped
from simrun.worker.proctree import group_members, signal_tree
from simrun.worker.sampler import MemorySampler

#: Seconds a command has to end after a forwarded SIGTERM before its tree is killed.
TERM_GRACE_S = 5.0
#: How many of the last lines of stderr a failure report quotes.
STDERR_TAIL_LINES = 50
_TAIL_BYTES = 64 * 1024
log = logging.getLogger(__name__)

_SAMPLE_INTERVAL_S = 0.02
#: Seconds simrun-exec waits for the killed members of a command's group to be gone.
_GROUP_GONE_WAIT_S = 10.0
#: Seconds between two looks at the OOM kill counter of the command's cgroup.
_OOM_POLL_S = 0.05
#: Seconds simrun-exec waits for the copies of the command's output to end.
_COPY_WAIT_S = 30.0


def _wait_group_gone(pgid: int, timeout_s: float = _GROUP_GONE_WAIT_S) -> list[int]:
    """Wait until no living process is left in group ``pgid``; returns those still there."""
    deadline = time.monotonic() + timeout_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


def settings_path(paths: TaskPaths) -> Path:
    """The JSON file of the settings that ``{settings}`` names."""
    return paths.task_dir / "settings.json"


def default_report_path(paths: TaskPaths, attempt: int) -> Path:
    """Where the result goes when neither ``--report`` nor the job names a place."""
    return task_logs(paths.task_dir) / f"attempt-{attempt}.report.json"


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` lines of the file (of its last 64 KiB), decoded leniently."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - _TAIL_BYTES))
            data = fh.read()
    except OSError:  # no log (the command never started) or an unreadable one: no tail
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def not_started(
    spec: CommandSpec, reason: str, started: str, outcome: CommandOutcome = "failed"
) -> CommandResult:
    """The result of a command of ``spec`` that never ran."""
    return CommandResult.not_run(reason, spec.limit_gb, spec.attempt, started, outcome)


class _PrepareError(SimrunError):
    """The task directory could not be made ready; the message says why."""


def _clear_out(paths: TaskPaths) -> None:
    """Empty the output directory, which must lie inside the task directory."""
    out = paths.out.resolve()
    task_dir = paths.task_dir.resolve()
    if task_dir not in out.parents:
        raise _PrepareError(
            f"refusing to clear the output directory {str(paths.out)!r}: it is not inside "
            f"the task directory {str(paths.task_dir)!r}"
        )
    try:
        shutil.rmtree(out)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _PrepareError(
            f"cannot clear the output directory {str(paths.out)!r}: {exc}"
        ) from None


def _prepare(spec: CommandSpec, paths: TaskPaths) -> None:
    """Make the directories, clear the output of a restarted attempt, write the settings."""
    try:
        if not spec.checkpoints and spec.attempt > 1:
            _clear_out(paths)
        for directory in (paths.task_dir, paths.out, paths.scratch, task_logs(paths.task_dir)):
            directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(settings_path(paths), spec.settings)
    except OSError as exc:
        raise _PrepareError(
            f"cannot prepare the task directory {str(paths.task_dir)!r}: {exc}"
        ) from None


def _start_problem(program: str, exc: OSError | ValueError) -> str:
    """One line saying why ``program`` could not be started."""
    if isinstance(exc, FileNotFoundError):
        if "/" in program:
            return f"command {program!r} does not exist"
        where = ", ".join(program_dirs(None))
        return f"command {program!r} not found on PATH nor beside simrun ({where})"
    if isinstance(exc, PermissionError):
        return f"command {program!r} cannot be run: permission denied (is it executable?)"
    if isinstance(exc, OSError):
        return f"command {program!r} cannot be run: {exc.strerror or exc}"
    return f"command {program!r} cannot be run: {exc}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def in_container(spec: CommandSpec, argv: list[str], name: str) -> list[str]:
    """``argv`` run inside the spec's image through its engine, as container ``name``: the
    store, scratch and inputs mounted where they are, the job's memory limit, and the
    variables simrun gives a command (``SIMRUN_PROCESSES``, thread counts, GPUs)."""
    assert spec.engine is not None
    assert spec.image is not None
    paths = spec.paths.task_paths()
    environ = with_threads(thread_environment(spec.processes), spec.processes)
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        environ["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return container_engine.run_argv(
        spec.engine,
        spec.image,
        argv,
        name=name,
        limit_gb=spec.limit_gb,
        workdir=paths.task_dir,
        mounts=[paths.store, paths.task_dir, paths.scratch, *paths.inputs.values()],
        environ=environ,
    )


def _end_container(spec: CommandSpec, name: str) -> bool:
    """Whether the engine's OOM killer ended the container ``name``; removes it."""
    assert spec.engine is not None
    oom = container_engine.inspect_oom(spec.engine, name)
    problem = container_engine.remove(spec.engine, name)
    if problem is not None:
        log.warning("the command's container was not removed: %s", problem)
    return bool(oom)


def engine_oom_result(spec: CommandSpec, result: CommandResult) -> CommandResult:
    """``result`` of a command the engine's OOM killer ended: killed at its limit."""
    report = result.report.model_copy(
        update={
            "killed_for_memory": True,
            "units": 0,
            "seconds_per_unit": None,
            "peak_memory_gb": (max((*result.report.peak_memory_gb, spec.limit_gb)),),
        }
    )
    how = f"exit code {result.exit_code}" if result.exit_code is not None else result.signal
    error = (
        f"the container engine's OOM killer ended the command's container at its memory "
        f"limit of {spec.limit_gb:g} GiB ({how})"
    )
    return result.model_copy(update={"outcome": "killed", "error": error, "report": report})


class CommandRun:
    """One run of a `CommandSpec` (its paths made absolute): `run` does it, `request_stop`
    (from any thread or a signal handler) ends it early as ``killed``."""

    def __init__(self, spec: CommandSpec) -> None:
        # Paths made absolute: the command runs in the task directory.
        report = None if spec.report is None else spec.report.absolute()
        self.spec = spec.model_copy(update={"paths": spec.paths.absolute(), "report": report})
        self.paths = self.spec.paths.task_paths()
        self._lock = threading.Lock()
        self._reason: str | None = None  # the first of "memory", "timeout", "terminated"
        self._limit_seen_gb = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._reaped = False
        self._timers: list[threading.Timer] = []
        self._bounds: CommandBounds | None = None
        self._kernel_oom = False
        self._over = threading.Event()  # the command's first process has ended

    def _signal_tree(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the command's process group and descendants (lock held, first
        process not reaped yet, so its ids are not reused)."""
        proc = self._proc
        if proc is None or self._reaped:
            return
        signal_tree(proc.pid, sig, group=True)
        if self._bounds is not None:
            self._bounds.signal(sig)

    def _ended(self) -> bool:
        """Whether the first process has exited already (it is not reaped yet)."""
        proc = self._proc
        if proc is None:
            return False
        if self._reaped:
            return True
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _stop(self, reason: str, sig: signal.Signals) -> None:
        with self._lock:
            if self._ended():  # too late: the command ended by itself
                return
            if self._reason is None:
                self._reason = reason
            self._signal_tree(sig)

    def _on_limit(self, current_gb: float) -> None:
        self._limit_seen_gb = current_gb
        self._stop("memory", signal.SIGKILL)

    def _watch_kernel(self, bounds: CommandBounds) -> None:
        """Until the command is over: after a kernel OOM kill, kill the rest for memory."""
        while not self._over.wait(_OOM_POLL_S):
            if bounds.oom_killed():
                self._kernel_oom = True
                self._stop("memory", signal.SIGKILL)
                return

    def _on_timeout(self) -> None:
        self._stop("timeout", signal.SIGKILL)

    def _terminate(self) -> None:
        self._stop("terminated", signal.SIGTERM)
        self._start_timer(TERM_GRACE_S, lambda: self._stop("terminated", signal.SIGKILL))

    def request_stop(self) -> None:
        """End the command: SIGTERM to its tree, SIGKILL `TERM_GRACE_S` later (from a new
        thread, so a signal handler never waits for a lock its own thread holds)."""
        threading.Thread(target=self._terminate, name="simrun-exec-stop", daemon=True).start()

    def _start_timer(self, seconds: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        with self._lock:
            if self._reaped:
                return
            self._timers.append(timer)
        timer.start()

    def run(self) -> CommandResult:
        """Prepare the task directory, run the command to its end, and say how it went."""
        spec, paths = self.spec, self.paths
        started = utc_now()
        try:
            argv = expand_argv(spec.command, settings_path(paths), paths.out, paths.inputs)
        except ValueError as exc:
            return not_started(spec, str(exc), started)
        try:
            _prepare(spec, paths)
        except _PrepareError as exc:
            return not_started(spec, str(exc), started).model_copy(update={"argv": tuple(argv)})
        container, oom = None, False
        if spec.image is not None and spec.engine is not None:
            container = container_engine.container_name()
            argv = in_container(spec, argv, container)
        out_log, err_log = command_log_paths(task_logs(paths.task_dir), spec.attempt)
        logs = {"stdout": str(out_log), "stderr": str(err_log)}
        bounds = self._bounds = CommandBounds.open(spec.cgroups, spec.limit_gb)
        try:
            with out_log.open("wb") as out_fh, err_log.open("wb") as err_fh:
                result = self._run_tree(argv, out_fh, err_fh, started, bounds)
        except OSError as exc:  # the logs cannot be opened (a full or read-only volume)
            problem = f"cannot open the log files of the command in {str(out_log.parent)!r}: {exc}"
            return not_started(spec, problem, started).model_copy(
                update={"argv": tuple(argv), "isolation": bounds.description}
            )
        finally:
            bounds.close()
            if container is not None:
                oom = _end_container(spec, container)
        result = result.model_copy(
            update={"argv": tuple(argv), "logs": logs, "isolation": bounds.description}
        )
        if container is not None and oom:
            result = engine_oom_result(spec, result)
        if result.outcome != "done":
            tail = stderr_tail(err_log)
            if tail:
                error = f"{result.error}\n--- last lines of stderr ({err_log}) ---\n{tail}"
                result = result.model_copy(update={"error": error})
        return result

    def _start_copies(
        self, proc: subprocess.Popen[bytes], out_fh: IO[bytes], err_fh: IO[bytes]
    ) -> list[threading.Thread]:
        """Threads copying the command's stdout and stderr into the log files, capped."""
        threads = []
        for pipe, sink, name in ((proc.stdout, out_fh, "stdout"), (proc.stderr, err_fh, "stderr")):
            assert pipe is not None  # started with PIPE
            segment = CappedSegment(self.spec.log_cap, "a stream")
            thread = threading.Thread(
                target=copy_capped,
                args=(pipe.fileno(), sink, segment, f"{name} of the command", self._over),
                name=f"simrun-exec-{name}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
        return threads

    def _end_copies(self, proc: subprocess.Popen[bytes], threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.join(_COPY_WAIT_S)
            if thread.is_alive():
                log.warning("the copy of the command's output %s did not end", thread.name)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    def _run_tree(
        self,
        argv: list[str],
        out_fh: IO[bytes],
        err_fh: IO[bytes],
        started: str,
        bounds: CommandBounds,
    ) -> CommandResult:
        spec = self.spec
        capped = spec.log_cap > 0
        with self._lock:
            if self._reason is not None:
                return not_started(
                    spec, "simrun-exec was stopped before the command started", started, "killed"
                )
            # A bare name: on PATH, then beside simrun's interpreter; argv[0] as written.
            found = None if "/" in argv[0] else find_program(argv[0])
            try:
                self._proc = subprocess.Popen(
                    argv,
                    executable=found,
                    env=with_threads(os.environ, spec.processes),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE if capped else out_fh,
                    stderr=subprocess.PIPE if capped else err_fh,
                    cwd=self.paths.task_dir,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=bounds.preexec,  # only an os.write to the cgroup
                )
            except (OSError, ValueError) as exc:
                return not_started(spec, _start_problem(argv[0], exc), started)
            except subprocess.SubprocessError as exc:  # the cgroup could not be joined
                problem = f"command {argv[0]!r} cannot join its memory cgroup: {exc}"
                return not_started(spec, problem, started)
        proc = self._proc
        copies = self._start_copies(proc, out_fh, err_fh) if capped else []
        t0 = time.monotonic()
        sampler = MemorySampler(
            proc.pid,
            interval_s=_SAMPLE_INTERVAL_S,
            members=bounds.members,
            limit_gb=spec.limit_gb,
            on_limit=self._on_limit,
        )
        watcher = threading.Thread(
            target=self._watch_kernel, args=(bounds,), name="simrun-exec-oom", daemon=True
        )
        try:
            sampler.start()
            watcher.start()
            if spec.timeout_s is not None:
                self._start_timer(spec.timeout_s, self._on_timeout)
            # Not reaped, so its group id stays ours while the rest is killed below.
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            wall_s = time.monotonic() - t0
            peak_gb = sampler.stop()
        finally:
            with self._lock:
                for timer in self._timers:
                    timer.cancel()
                self._signal_tree(signal.SIGKILL)  # what is left of the group
                bounds.kill_all(proc.pid)  # and of the cgroup, or of the tree
                proc.wait()
                self._reaped = True
            self._over.set()
            watcher.join()
            # SIGKILL is not instant; the group id is not reused while a member exists.
            left = _wait_group_gone(proc.pid)
            if left:
                log.warning("processes %s of the command survive SIGKILL", left)
            self._end_copies(proc, copies)
        if bounds.oom_killed():  # also when it ended the first process, before any look
            self._kernel_oom = True
            self._reason = self._reason if self._reason is not None else "memory"
        if self._kernel_oom:
            peak_gb = max(peak_gb, bounds.kernel_peak_gb() or 0.0)
        return self._result(proc.returncode, peak_gb, wall_s, started)

    def _verdict(self, code: int, how: str, sig: str | None) -> tuple[CommandOutcome, str]:
        """The outcome of a command that ended with ``code``, and why."""
        limit_gb = self.spec.limit_gb
        if self._reason == "memory" and self._kernel_oom:
            return "killed", (
                "the kernel's OOM killer ended a process of the command: its memory cgroup "
                f"reached the kernel limit of {KERNEL_LIMIT_FACTOR:g} x its limit of "
                f"{limit_gb:g} GiB, so the command was killed ({how})"
            )
        if self._reason == "memory":
            return "killed", (
                f"the command's processes used {self._limit_seen_gb:.3f} GiB of anonymous "
                f"memory, more than its limit of {limit_gb:g} GiB, and was killed ({how})"
            )
        if self._reason == "timeout":
            return "timeout", (
                f"the command ran longer than its timeout of {self.spec.timeout_s:g} s "
                f"and was killed ({how})"
            )
        if self._reason == "terminated":
            return "killed", f"simrun-exec was asked to stop, so it stopped the command ({how})"
        if code == 0:
            return "done", ""
        if code > 0:
            return "failed", f"the command exited with code {code}"
        return "failed", f"the command was killed by {sig}, not by simrun-exec"

    def _result(self, code: int, peak_gb: float, wall_s: float, started: str) -> CommandResult:
        spec = self.spec
        exit_code = code if code >= 0 else None
        sig = _signal_name(-code) if code < 0 else None
        how = f"exit code {code}" if code >= 0 else f"signal {sig}"
        outcome, error = self._verdict(code, how, sig)
        done = outcome == "done"
        report = WorkerReport(
            peak_memory_gb=(peak_gb,),
            seconds_per_unit=wall_s if done else None,
            units=1 if done else 0,
            limit_gb=spec.limit_gb,
            killed_for_memory=self._reason == "memory",
        )
        return CommandResult(
            outcome=outcome,
            exit_code=exit_code,
            error=error,
            report=report,
            started=started,
            finished=utc_now(),
            wall_s=wall_s,
            signal=sig,
            attempt=spec.attempt,
        )
