"""Command jobs: the ``command`` of an unsplit task, run through a ``simrun-exec`` child
(`simrun.worker.exec`) that bounds its memory and writes a report read back here;
cancelling stops it (SIGTERM, forwarded to the command)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from simrun.core.jobs import JobSpec
from simrun.core.layout import task_logs
from simrun.core.reports import WorkerReport
from simrun.core.wire import Outcome
from simrun.worker.exec.run import TERM_GRACE_S, not_started
from simrun.worker.exec.spec import (
    CommandResult,
    CommandSpec,
    JobFileError,
    read_json,
    write_json_atomic,
)
from simrun.worker.ledger import Ledger
from simrun.worker.pool.output import DEFAULT_COMMAND_LOG_CAP

log = logging.getLogger(__name__)

#: Seconds to wait for simrun-exec after a stop, beyond the grace it gives the command.
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
    return not_started(spec, error, started="")


async def run_command_job(
    spec: CommandSpec,
    job_file_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> CommandResult:
    """Run ``spec`` in a ``simrun-exec`` child (its files left in ``job_file_dir``; ``env``:
    its whole environment); its result, ``failed`` when it died without a report."""
    stem = f"attempt-{spec.attempt}-{uuid.uuid4().hex[:12]}"
    job_path = job_file_dir / f"{stem}.job.json"
    report_path = job_file_dir / f"{stem}.report.json"
    await asyncio.to_thread(write_json_atomic, job_path, spec.to_dict())
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "simrun.worker.exec", "--job", str(job_path), "--report", str(report_path),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
    )  # fmt: skip
    try:
        _, stderr = await proc.communicate()
    except asyncio.CancelledError:
        await _stop(proc)
        raise
    returncode = proc.returncode if proc.returncode is not None else -1
    return await asyncio.to_thread(_result_or_failure, spec, report_path, returncode, stderr)


def command_outcome(result: CommandResult) -> Outcome:
    """The outcome of the unit "command": simrun-exec's, but handed back when it was killed
    for another reason than memory (simrun-exec was stopped)."""
    if result.outcome == "killed" and not result.report.killed_for_memory:
        return "not_run"
    return result.outcome


def _child_environment(gpu_ids: tuple[str, ...], hide_gpus: bool) -> dict[str, str] | None:
    """This environment with the job's GPUs in ``CUDA_VISIBLE_DEVICES`` (None: unchanged)."""
    if not gpu_ids and not hide_gpus:
        return None
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)}


async def run_command(
    spec: JobSpec,
    command: str,
    ledger: Ledger,
    *,
    limit_gb: float,
    gpu_ids: tuple[str, ...],
    hide_gpus: bool,
    cgroups: str = "auto",
    log_cap: int = DEFAULT_COMMAND_LOG_CAP,
    processes: int = 1,
    engine: str | None = None,
) -> WorkerReport:
    """Run a command job through simrun-exec (in its image with an ``engine``), record the
    unit "command"; the measurements. ``command``: the template of the job's type as
    installed on this worker, never one from the payload."""
    paths = spec.paths.task_paths()
    command_spec = CommandSpec(
        command=command,
        settings=dict(spec.settings),
        paths=paths,
        limit_gb=limit_gb,
        timeout_s=spec.timeout_s,
        checkpoints=spec.checkpoints,
        attempt=spec.attempt,
        cgroups="off" if cgroups == "off" else "auto",
        log_cap=log_cap,
        processes=processes,
        image=spec.image if engine is not None else None,
        engine=engine,
    )
    result = await run_command_job(
        command_spec, task_logs(Path(paths.task_dir)), env=_child_environment(gpu_ids, hide_gpus)
    )
    log.info(
        "command of task %s/%s attempt %d: %s; memory bounded by %s", spec.run, spec.task,
        spec.attempt, result.outcome, result.isolation or "nothing known (no report)",
    )  # fmt: skip
    outcome = command_outcome(result)
    ledger.record("command", outcome, seconds=result.wall_s, error=result.error or None)
    return result.report
