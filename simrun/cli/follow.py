"""Following a run until it ends, and telling the user how it ended.

`follow` polls a reader (the embedded controller, or a service over HTTP) and feeds a
progress view until the run ends, Ctrl-C is pressed, the embedded session reports a
problem, or the run cannot go on by itself (every active task blocked). `report_end`
prints the summary table, the failed units with the last line of their error, and the
command that goes on from there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from rich.console import Console
from rich.markup import escape

from simrun.cli.progress import (
    ProgressView,
    failure_lines,
    format_duration,
    stuck_reason,
    summary_table,
)
from simrun.client import Client
from simrun.core.views import FailureView, RunSummary, RunView

__all__ = [
    "Outcome",
    "Reader",
    "RemoteReader",
    "follow",
    "report_end",
]

#: How long a run must stay stuck before embedded mode gives up on it.
STUCK_AFTER_S = 3.0


class Reader(Protocol):
    """Where a run's view comes from: a service (`RemoteReader`) or a store on this
    machine (`simrun.local.reads.StoreReader`)."""

    async def run(self, run_id: str) -> RunView | None: ...

    async def failures(self, run_id: str) -> list[FailureView]: ...

    async def runs(self, limit: int = 50) -> list[RunSummary]: ...


@dataclass(frozen=True)
class Outcome:
    """How following a run stopped: it ``ended``, was ``interrupted`` (Ctrl-C), is
    ``stuck`` (``detail`` says why) or the embedded session had a ``problem``."""

    run: RunView
    reason: Literal["ended", "interrupted", "stuck", "problem"]
    detail: str = ""


async def follow(
    fetch: Callable[[], Awaitable[RunView]],
    view: ProgressView,
    *,
    poll_s: float = 0.25,
    interrupted: asyncio.Event | None = None,
    problem: Callable[[], str | None] | None = None,
    stuck_after_s: float | None = None,
) -> Outcome:
    """Show the run ``fetch`` returns every ``poll_s`` until it is no longer running (or
    one of the other reasons of `Outcome`)."""
    stuck_since: float | None = None
    interrupted = interrupted or asyncio.Event()
    try:
        while True:
            run = await fetch()
            view.update(run)
            if run.state != "running":
                return Outcome(run, "ended")
            if interrupted.is_set():
                return Outcome(run, "interrupted")
            if problem is not None and (detail := problem()) is not None:
                return Outcome(run, "problem", detail)
            if stuck_after_s is not None:
                reason = stuck_reason(run)
                if reason is None:
                    stuck_since = None
                elif stuck_since is None:
                    stuck_since = time.monotonic()
                elif time.monotonic() - stuck_since >= stuck_after_s:
                    return Outcome(run, "stuck", reason)
            try:
                await asyncio.wait_for(interrupted.wait(), poll_s)
            except TimeoutError:
                continue
    finally:
        view.close()


class RemoteReader:
    """Runs as a service answers over HTTP (the blocking client, in a thread)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def run(self, run_id: str) -> RunView | None:
        return await asyncio.to_thread(self.client.run, run_id)

    async def failures(self, run_id: str) -> list[FailureView]:
        return await asyncio.to_thread(self.client.failures, run_id)

    async def runs(self, limit: int = 50) -> list[RunSummary]:
        return await asyncio.to_thread(self.client.runs, limit)


def _elapsed(run: RunView) -> float:
    return max(0.0, (run.finished_s or run.updated_s) - run.created_s)


def report_end(
    out: Console,
    run: RunView,
    failures: Sequence[FailureView],
    replay: str,
    outputs: str | None = None,
) -> int:
    """Print how a run ended: the summary table; on success where its outputs are; else
    its failed units and ``replay``, the command that retries them. Returns the exit
    status (0 when it succeeded)."""
    out.print(summary_table(run))
    state = run.state
    took = format_duration(_elapsed(run))
    if state == "succeeded":
        where = f" · outputs in {escape(outputs)}" if outputs else ""
        out.print(f"[bold green]run {run.id} succeeded[/] in {took}{where}")
        return 0
    message = f": {escape(run.message)}" if run.message else ""
    out.print(f"[bold red]run {run.id} {state}[/]{message}")
    for line in failure_lines(failures):
        out.print(f"  {line}", markup=False, soft_wrap=True)
    if failures:
        out.print("fix the cause, then retry the failed units (the done ones are kept):")
        out.print(f"  {replay}", markup=False, soft_wrap=True)
    return 1
