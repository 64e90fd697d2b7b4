"""The runs of a store on this machine as views (what ``simrun status --store`` shows), read
from the store, or through the embedded controller while its session runs."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

from simrun.core.layout import StoreLayout
from simrun.core.states import INTERRUPTED
from simrun.core.views import FailureView, RunSummary, RunView
from simrun.local import lock
from simrun.local.machine import LocalError
from simrun.resources import ResourceStore
from simrun.runstore.store import RunStore
from simrun.service.controller import Controller
from simrun.service.views import failure_view, run_summary, run_view

Shown = TypeVar("Shown", bound=RunSummary)


@dataclasses.dataclass
class StoreReader:
    """Runs as a store holds them, each task's outputs under ``shown_store`` (the store as the
    user named it); with the embedded ``controller``, as the session sees them."""

    store: RunStore
    resources: ResourceStore
    shown_store: Path
    controller: Controller | None = None

    async def _view(self, run_id: str) -> RunView | None:
        if self.controller is not None:
            return await self.controller.queries.run(run_id)
        row = await self.store.run(run_id)
        if row is None:
            return None
        view = run_view(row, await self.store.tasks(run_id), await self.store.counts(run_id), {})
        return await self._shown(view)

    async def _shown(self, view: Shown) -> Shown:
        """``view`` as shown from outside its session: a running run whose session is gone is
        `INTERRUPTED`, paused since its last activity when the session had no time to say."""
        if view.state != "running":
            return view
        if self.controller is not None:  # the session's own reads: the runs it holds
            held = view.id in self.controller.store.held
            return dataclasses.replace(view, state=INTERRUPTED) if held else view
        if lock.holder(self.shown_store) is not None:
            return view
        pauses = view.pauses
        if not any(resumed is None for _, resumed in pauses):
            last = await self.store.last_activity_s(view.id)
            if last is not None:
                pauses = (*pauses, (last, None))
        return dataclasses.replace(view, state=INTERRUPTED, pauses=pauses)

    def version(self, run_id: str) -> int:
        """The change version of ``run_id``, to wait with `changed` for a later one (always 0
        without the embedded controller)."""
        return self.controller.changes.version(run_id) if self.controller is not None else 0

    async def changed(self, run_id: str, after_version: int, timeout_s: float) -> None:
        """Return once ``run_id`` changed past ``after_version`` or ``timeout_s`` passed (only
        the latter without the embedded controller, which notifies the changes)."""
        if self.controller is None:
            await asyncio.sleep(timeout_s)
            return
        await self.controller.changes.wait(run_id, after_version, timeout_s)

    async def run(self, run_id: str) -> RunView | None:
        view = await self._view(run_id)
        if view is None:
            return None
        layout = StoreLayout(self.shown_store)
        tasks = tuple(
            dataclasses.replace(t, out=str(layout.task_out(run_id, t.name))) for t in view.tasks
        )
        return dataclasses.replace(view, tasks=tasks)

    async def runs(self, limit: int = 50) -> list[RunSummary]:
        return [await self._shown(run_summary(r)) for r in await self.store.runs(limit=limit)]

    async def failures(self, run_id: str) -> list[FailureView]:
        return [failure_view(u) for u in await self.store.failures(run_id)]


def store_db(store: Path) -> Path:
    """The SQLite file of the store of ``simrun run`` at ``store``; `LocalError` if none."""
    db = StoreLayout(store).db
    if not db.is_file():
        raise LocalError(
            f"{store} is not a simrun store (there is no {db}); give the --store that "
            "`simrun run` used"
        )
    return db


@asynccontextmanager
async def open_store_reader(store: Path) -> AsyncIterator[StoreReader]:
    """A reader of the store of ``simrun run`` at ``store`` (which must exist)."""
    db = store_db(store)
    runs = await RunStore.open(db)
    try:
        yield StoreReader(runs, ResourceStore(db, keep_open=False), store)
    finally:
        await runs.close()
