"""Unsplit tasks: what a worker calls to run a task's ``command`` through ``simrun-exec``.

`run_command_job` is for an asyncio process (the worker): it writes the job file, starts
``python -m simrun.worker.execute`` (``simrun-exec``) as a child and awaits its report, so
the event loop never blocks on the command. Cancelling it stops the command (SIGTERM to
``simrun-exec``, which forwards it to the command's process group) before re-raising.

``python -m simrun.worker.execute --job JOB.json [--report REPORT.json]`` is the same as
``simrun-exec``. The pieces live in ``exec_argv`` (the template), ``exec_spec`` (the job and
report files), ``exec_run`` (running a process tree) and ``exec_cli`` (the command line).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from simrun.core.reports import WorkerReport
from simrun.worker.exec.argv import expand_argv
from simrun.worker.exec.main import exec_main
from simrun.worker.exec.run import TERM_GRACE_S
from simrun.worker.exec.spec import (
    CommandResult,
    CommandSpec,
    JobFileError,
    read_json,
    write_json_atomic,
)

__all__ = [
    "CommandResult",
    "CommandSpec",
    "JobFileError",
    "exec_main",
    "expand_argv",
    "run_command_job",
]

#: Seconds `run_command_job` waits for simrun-exec after it forwarded a stop, beyond the
#: grace simrun-exec itself gives the command.
_STOP_WAIT_S = TERM_GRACE_S + 5.0


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Ask simrun-exec to stop its command and wait for it; kill it if it does not end."""
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        await asyncio.wait_for(proc.wait(), _STOP_WAIT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()


def _result_or_failure(
    spec: CommandSpec, report_path: Path, returncode: int, stderr: bytes
) -> CommandResult:
    """The report simrun-exec wrote, or a failed result that says why there is none."""
    try:
        return CommandResult.from_dict(read_json(report_path, "report"))
    except JobFileError as exc:
        problem = str(exc)
    said = stderr.decode("utf-8", errors="replace").strip()
    error = f"simrun-exec exited with code {returncode} without a usable report: {problem}"
    if said:
        error += f"\n--- stderr of simrun-exec ---\n{said[-8000:]}"
    return CommandResult(
        outcome="failed",
        exit_code=None,
        error=error,
        report=WorkerReport(
            peak_memory_gb=(), seconds_per_unit=None, units=0, limit_gb=spec.limit_gb
        ),
        started="",
        finished="",
        attempt=spec.attempt,
    )


async def run_command_job(
    spec: CommandSpec,
    job_file_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> CommandResult:
    """Run ``spec`` in a ``simrun-exec`` child process and return its result.

    The job and report files are written to ``job_file_dir`` under a fresh name
    (``attempt-<N>-<random>.job.json`` / ``.report.json``) and left there. ``env`` is the
    whole environment of simrun-exec and of the command (None: this process's own).
    A simrun-exec that dies without a report yields a ``failed`` result saying so.
    """
    stem = f"attempt-{spec.attempt}-{uuid.uuid4().hex[:12]}"
    job_path = job_file_dir / f"{stem}.job.json"
    report_path = job_file_dir / f"{stem}.report.json"
    await asyncio.to_thread(write_json_atomic, job_path, spec.to_dict())
    proc = await asyncio.create_subprocess_exec(
        python,
        "-m",
        "simrun.worker.execute",
        "--job",
        str(job_path),
        "--report",
        str(report_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
    )
    try:
        _, stderr = await proc.communicate()
    except asyncio.CancelledError:
        await _stop(proc)
        raise
    returncode = proc.returncode if proc.returncode is not None else -1
    return await asyncio.to_thread(_result_or_failure, spec, report_path, returncode, stderr)


if __name__ == "__main__":
    sys.exit(exec_main())
