"""Command jobs: the ``command`` of an unsplit task, run through ``simrun-exec``.

The worker container never runs the command itself: `simrun.worker.execute.run_command_job`
starts ``simrun-exec`` as a child process, which expands the argv template, runs it without
a shell, samples the memory of the whole process tree, enforces the limit and writes a
report that is read back here.

The limit of the tree is the job's memory request (see `simrun.worker.jobs.request_for`):
``memory_base_gb + memory_per_worker_gb * n``, n being every process slot of the container
for a type that ``uses_cores`` and 1 otherwise. ``simrun-exec`` keeps the output directory
of earlier attempts when the type ``checkpoints``; otherwise an attempt above 1 starts from
an empty output directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from simrun.core.jobs import JobSpec
from simrun.core.layout import task_logs
from simrun.core.reports import WorkerReport
from simrun.core.wire import Outcome
from simrun.worker.execute import CommandResult, CommandSpec, run_command_job
from simrun.worker.ledger import Ledger

__all__ = ["command_outcome", "run_command"]


def command_outcome(result: CommandResult) -> Outcome:
    """The outcome of the unit "command": as simrun-exec says, except that a command killed
    for another reason than memory (someone stopped simrun-exec) is handed back."""
    if result.outcome == "killed" and not result.report.killed_for_memory:
        return "not_run"
    return result.outcome


def _child_environment(gpu_ids: tuple[str, ...], hide_gpus: bool) -> dict[str, str] | None:
    """The environment of simrun-exec and its command: this process's, with the GPUs the job
    was granted (or none) in ``CUDA_VISIBLE_DEVICES``; None to inherit it unchanged."""
    if not gpu_ids and not hide_gpus:
        return None
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)}


async def run_command(
    spec: JobSpec,
    ledger: Ledger,
    *,
    limit_gb: float,
    gpu_ids: tuple[str, ...],
    hide_gpus: bool,
) -> WorkerReport:
    """Run the command job ``spec``; records the unit "command" and returns the measurements."""
    assert spec.command is not None  # JobSpec checks a command job has one
    paths = spec.paths.task_paths()
    command_spec = CommandSpec(
        command=spec.command,
        settings=dict(spec.settings),
        paths=paths,
        limit_gb=limit_gb,
        timeout_s=spec.timeout_s,
        checkpoints=spec.checkpoints,
        attempt=spec.attempt,
    )
    result = await run_command_job(
        command_spec,
        task_logs(Path(paths.task_dir)),
        env=_child_environment(gpu_ids, hide_gpus),
    )
    outcome = command_outcome(result)
    ledger.record(
        "command",
        outcome,
        seconds=result.wall_s,
        error=result.error or None,
    )
    return result.report
