"""Step 1 of the controller: the workers' reports, read in batches, each written in one
transaction and then acknowledged."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from simrun.core.clock import Clock
from simrun.core.reports import ReportEntry, StreamReport, WorkerReport
from simrun.queues.client import JobQueue, quarantine
from simrun.resources import ResourceKey, ResourceStore
from simrun.resources.store import Record
from simrun.runstore.rows import TaskRow
from simrun.runstore.store import RunStore
from simrun.service.advance import RunsToAdvance
from simrun.service.dispatch import ResolveCache
from simrun.service.settings import ControllerSettings

log = logging.getLogger(__name__)


def is_oom(entry_or_report: ReportEntry | WorkerReport) -> bool:
    """Whether a report says a worker process was killed for memory (by the worker, or a
    unit reported killed)."""
    if isinstance(entry_or_report, WorkerReport):
        return entry_or_report.killed_for_memory
    return entry_or_report.report.killed_for_memory or any(
        outcome == "killed" for outcome in entry_or_report.outcomes.values()
    )


def record_of(entry: ReportEntry, tasks: Mapping[tuple[str, str], TaskRow]) -> Record | None:
    """The observation of a report, or None when it measured nothing to learn from."""
    task = tasks.get((entry.run, entry.task))
    if task is None or task.resource_key is None or entry.kind == "merge":
        return None
    oom = is_oom(entry)
    if oom and not entry.report.limit_gb > 0:
        return None
    if not oom and (not entry.report.peak_memory_gb or entry.report.units <= 0):
        return None
    resources = task.resources or {}
    base_gb = float(resources.get("memory_base_gb") or 0.0)
    size = resources.get("input_bytes")
    return Record(
        ResourceKey.from_text(task.resource_key),
        entry.report,
        base_gb,
        oom,
        entry.run,
        size if isinstance(size, int) and size >= 0 else None,
    )


class Ingest:
    """Reads the report stream into the stores, marking the runs that changed and forgetting
    the learned keys in ``resolved``."""

    def __init__(
        self,
        settings: ControllerSettings,
        store: RunStore,
        resources: ResourceStore,
        queue: JobQueue,
        advance: RunsToAdvance,
        resolved: ResolveCache,
        clock: Clock,
    ) -> None:
        self.settings, self.store, self.resources, self.queue = settings, store, resources, queue
        self.advance, self.resolved, self.clock = advance, resolved, clock
        self._pending_read = True  # first read what was delivered before a restart
        #: Whether the last `step` read the stream to its end.
        self.drained = False
        #: The id of the last entry read: the loop waits for one after it.
        self.last_id: str | None = None

    def redis_back(self) -> None:
        """Redis came back: read first what was delivered and not acknowledged."""
        self._pending_read = True

    async def step(self) -> bool:
        """Apply up to ``report_batches`` batches of reports: whether a unit changed."""
        s = self.settings
        changed = False
        self.drained = False
        for _ in range(s.report_batches):
            batch = await self.queue.read_reports(
                s.group, s.consumer, count=s.report_batch, block_ms=None, pending=self._pending_read
            )
            if not batch:
                if self._pending_read:
                    self._pending_read = False
                    continue
                self.drained = True
                break
            if not self._pending_read:
                self.last_id = batch[-1].id
            entries = [b.entry for b in batch if b.entry is not None]
            try:
                await self._quarantine([b for b in batch if b.entry is None])
                if entries:
                    changed |= await self.apply(entries)
                await self.queue.ack(s.group, [b.id for b in batch])
            except BaseException:
                # Not acknowledged: read the delivered entries again before new ones.
                self._pending_read = True
                raise
        return changed

    async def _quarantine(self, bad: Sequence[StreamReport]) -> None:
        """Move the entries that cannot be read to the dead-letter stream (they are then
        acknowledged with the batch, never read again)."""
        for item in bad:
            problem = item.problem or "unreadable"
            log.error("moved report %s aside to the dead letters: %s", item.id, problem)
            raw = item.raw or {}
            await quarantine(self.queue.redis, self.queue.keys, "report", problem, raw, item.id)

    async def drain(self) -> None:
        """Apply every report in the stream now."""
        while True:
            await self.step()
            if self.drained:
                return

    async def apply(self, entries: Sequence[ReportEntry]) -> bool:
        """Write one batch: unit outcomes, observations and refusals in one transaction."""
        tasks: dict[tuple[str, str], TaskRow] = {}
        for run_id in {e.run for e in entries}:
            tasks.update({(t.run, t.name): t for t in await self.store.tasks(run_id)})
        async with self.store.transaction() as conn:
            applied = await self.store.apply_reports(
                entries, conn=conn, limits=self.settings.limits, now_s=self.clock.now()
            )
            records = [r for e in applied.recorded if (r := record_of(e, tasks)) is not None]
            await self.resources.record_many(records, conn)
            for (run_id, task), message in applied.refused.items():
                await self.store.set_task(run_id, task, status=message, conn=conn)
        for run_id, _ in applied.touched:
            self.advance.mark(run_id)
        self.resolved.forget(r.key.text() for r in records)
        return applied.changed > 0
