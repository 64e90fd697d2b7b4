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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

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
from simrun.core.layout import StoreLayout
from simrun.resources import ResourceStore
from simrun.runstore import RunStore
from simrun.service.controller import Controller
from simrun.service.views import RunView, failure_view, run_view

__all__ = [
    "Outcome",
    "Reader",
    "RemoteReader",
    "StoreReader",
    "follow",
    "report_end",
]

#: How long a run must stay stuck before embedded mode gives up on it.
STUCK_AFTER_S = 3.0


class Reader(Protocol):
    """Where a run's view comes from."""

    async def run(self, run_id: str) -> dict[str, Any] | None: ...

    async def failures(self, run_id: str) -> list[dict[str, Any]]: ...

    async def runs(self, limit: int = 50) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Outcome:
    """How following a run stopped: it ``ended``, was ``interrupted`` (Ctrl-C), is
    ``stuck`` (``detail`` says why) or the embedded session had a ``problem``."""

    run: dict[str, Any]
    reason: Literal["ended", "interrupted", "stuck", "problem"]
    detail: str = ""


async def follow(
    fetch: Callable[[], Awaitable[dict[str, Any]]],
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
            if run["state"] != "running":
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


class StoreReader:
    """Runs as a store holds them. The view tells what a service's tells (times, kills,
    requested and peak memory per process, which the store keeps on each task); this adds
    where each task's outputs are, under ``shown_store`` (the store as the user named it).

    With the embedded ``controller``, ETAs count the live worker processes; without (a
    store read from outside its session), there are none to count.
    """

    def __init__(
        self,
        store: RunStore,
        resources: ResourceStore,
        shown_store: Path,
        controller: Controller | None = None,
    ) -> None:
        self.store = store
        self.resources = resources
        self.shown_store = shown_store
        self.controller = controller

    async def _view(self, run_id: str) -> RunView | None:
        if self.controller is not None:
            return await self.controller.run(run_id)
        row = await self.store.run(run_id)
        if row is None:
            return None
        return run_view(row, await self.store.tasks(run_id), await self.store.counts(run_id), {})

    async def run(self, run_id: str) -> dict[str, Any] | None:
        view = await self._view(run_id)
        if view is None:
            return None
        data = view.to_dict()
        for task in data["tasks"]:
            task["out"] = str(StoreLayout(self.shown_store).task_out(run_id, task["name"]))
        return data

    async def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = await self.store.runs(limit=limit)
        return [{k: v for k, v in asdict(r).items() if k != "document"} for r in rows]

    async def failures(self, run_id: str) -> list[dict[str, Any]]:
        return [asdict(failure_view(u)) for u in await self.store.failures(run_id)]


class RemoteReader:
    """Runs as a service answers over HTTP (the blocking client, in a thread)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def run(self, run_id: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.client.run, run_id)

    async def failures(self, run_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.client.failures, run_id)

    async def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.client.runs, limit)


def _elapsed(run: dict[str, Any]) -> float | None:
    end = run.get("finished_s") or run.get("updated_s")
    return None if end is None else max(0.0, float(end) - float(run["created_s"]))


def report_end(
    out: Console,
    run: dict[str, Any],
    failures: Sequence[dict[str, Any]],
    replay: str,
    outputs: str | None = None,
) -> int:
    """Print how a run ended: the summary table; on success where its outputs are; else
    its failed units and ``replay``, the command that retries them. Returns the exit
    status (0 when it succeeded)."""
    out.print(summary_table(run))
    state = run["state"]
    took = format_duration(_elapsed(run))
    if state == "succeeded":
        where = f" · outputs in {escape(outputs)}" if outputs else ""
        out.print(f"[bold green]run {run['id']} succeeded[/] in {took}{where}")
        return 0
    message = f": {escape(run['message'])}" if run.get("message") else ""
    out.print(f"[bold red]run {run['id']} {state}[/]{message}")
    for line in failure_lines(failures):
        out.print(f"  {line}", markup=False, soft_wrap=True)
    if failures:
        out.print("fix the cause, then retry the failed units (the done ones are kept):")
        out.print(f"  {replay}", markup=False, soft_wrap=True)
    return 1
