"""How a followed run ended, for the user: the summary table, the failed units with the
last line of their error, and the command that goes on from there."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from simrun.cli.progress import failure_lines, format_duration, summary_table
from simrun.core.views import FailureView, RunView, running_seconds


def _elapsed(run: RunView) -> float:
    return running_seconds(run.created_s, run.finished_s or run.updated_s, run.pauses)


def report_end(
    out: Console,
    run: RunView,
    failures: Sequence[FailureView],
    replay: str,
    outputs: str | None = None,
    logs_where: Sequence[str] | None = None,
) -> int:
    """Print how a run ended: the summary table; on success where its outputs are; else
    its failed units (with ``logs_where``, the ``--store``/``--url`` of ``simrun logs``:
    the command that shows each one's log) and ``replay``, the command that retries them.
    Returns the exit status (0 when it succeeded)."""
    out.print(summary_table(run))
    state = run.state
    took = format_duration(_elapsed(run))
    if state == "succeeded":
        where = f" · outputs in {escape(outputs)}" if outputs else ""
        out.print(f"[bold green]run {run.id} succeeded[/] in {took}{where}")
        return 0
    message = f": {escape(run.message)}" if run.message else ""
    out.print(f"[bold red]run {run.id} {state}[/]{message}")
    run_id = run.id if logs_where is not None else None
    for line in failure_lines(failures, run=run_id, where=logs_where or ()):
        out.print(f"  {line}", markup=False, soft_wrap=True)
    if failures:
        out.print("fix the cause, then retry the failed units (the done ones are kept):")
        out.print(f"  {replay}", markup=False, soft_wrap=True)
    return 1
