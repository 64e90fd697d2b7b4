"""Step 4 of the controller: moving runs along. Tasks start when their inputs are done
(``count_units`` in a thread), follow their units to merging, done or failed, and runs end
when nothing can progress. The rules are `simrun.core.states.next_task_state` and
`simrun.core.states.run_state`.

Only the runs that may move are looked at (`RunsToAdvance`: those whose units changed,
submitted or replayed), and all of them now and then (after a reconciliation).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

from simrun.core.clock import Clock
from simrun.core.states import ACTIVE_TASK_STATES, TaskCounts, next_task_state, run_state
from simrun.plugins import TaskType, count_units
from simrun.resources import resource_key
from simrun.runstore import RunRow, RunStore, TaskRow
from simrun.service import decisions

__all__ = ["Advance", "RunsToAdvance", "advance_run", "failure_message", "start_task"]

log = logging.getLogger(__name__)

#: Told of a task that is done: (run, task).
TaskDone = Callable[[str, str], Awaitable[None]]


class RunsToAdvance:
    """The runs a step of the controller advances: those marked since the last one, or all
    of them."""

    def __init__(self) -> None:
        self._runs: set[str] = set()
        self._all = True

    def mark(self, run_id: str) -> None:
        """``run_id`` may move (its units changed, it was submitted or replayed)."""
        self._runs.add(run_id)

    def mark_all(self) -> None:
        """Every running run may move (look at each in the next step)."""
        self._all = True

    def take(self) -> tuple[bool, set[str]]:
        """Whether to look at every run, and the runs marked; both cleared."""
        taken = self._all, self._runs
        self._all, self._runs = False, set()
        return taken


class Advance:
    """The advance step: the runs of ``marks`` that changed move along; ``on_end`` is told
    of each run that ends (its attempts hashes may go), ``on_task_done`` of each task that
    is done (run and task: its scratch directory may go)."""

    def __init__(
        self,
        store: RunStore,
        types: Mapping[str, TaskType],
        marks: RunsToAdvance,
        on_end: Callable[[str], None],
        clock: Clock,
        on_task_done: TaskDone | None = None,
    ) -> None:
        self.store, self.types, self.marks = store, types, marks
        self.on_end, self.clock = on_end, clock
        self.on_task_done = on_task_done

    async def step(self) -> bool:
        """Advance the runs that changed since the last step (all of them now and then)."""
        everything, dirty = self.marks.take()
        changed = False
        try:
            for run in await self.store.running_runs():
                if (everything or run.id in dirty) and await advance_run(
                    self.store, self.types, run, self.clock.now(), self.on_task_done
                ):
                    changed = True
                    after = await self.store.run(run.id)
                    if after is not None and after.state != "running":
                        self.on_end(run.id)
        except BaseException:
            self.marks.mark_all()
            raise
        return changed


async def advance_run(
    store: RunStore,
    types: Mapping[str, TaskType],
    run: RunRow,
    now: float,
    on_task_done: TaskDone | None = None,
) -> bool:
    """Start the tasks of ``run`` whose inputs are done, move its started tasks along their
    units, and end the run when nothing can progress (``now``: seconds since the epoch).
    ``on_task_done`` is awaited for each task that is done. True when something changed."""
    tasks = await store.tasks(run.id)
    counts = await store.counts(run.id)
    states: dict[str, str] = {t.name: t.state for t in tasks}
    changed = False
    for task in tasks:  # in topological order: a task done here lets the next start
        state = states[task.name]
        if state == "waiting" and all(states.get(d) == "done" for d in task.depends):
            states[task.name] = await start_task(store, types, run, task, now)
            counts = await store.counts(run.id)
            changed = True
            state = states[task.name]
        if state not in ACTIVE_TASK_STATES:
            continue
        new, make_merge = next_task_state(
            state,
            counts.get(task.name, TaskCounts()),
            task.has_merge,
        )
        if make_merge:
            await store.add_merge_unit(run.id, task.name)
            changed = True
        if new != state:
            await store.set_task(run.id, task.name, state=new, now_s=now)
            states[task.name] = new
            changed = True
            if new == "done" and on_task_done is not None:
                await on_task_done(run.id, task.name)
    deps = {t.name: t.depends for t in tasks}
    outcome = run_state(states, deps)
    if outcome != "running":
        message = "" if outcome == "succeeded" else await failure_message(store, run.id)
        await store.set_run_state(run.id, outcome, message, now)
        log.info("run %s %s %s", run.id, outcome, message)
        changed = True
    return changed


async def start_task(
    store: RunStore, types: Mapping[str, TaskType], run: RunRow, task: TaskRow, now: float
) -> str:
    """Start a task whose inputs are done: count its units (in a thread) and make them
    pending. Returns its new state."""
    task_type = types.get(task.type)
    if task_type is None:
        status = f"task type {task.type!r} is not installed in the service"
        await store.set_task(run.id, task.name, state="failed", status=status, now_s=now)
        return "failed"
    try:
        key = resource_key(task_type, task.settings, run.model)
        units = 1
        if task_type.splittable:
            units = await asyncio.to_thread(count_units, task_type, task.settings)
    except Exception as exc:  # noqa: BLE001  # plugin code may raise anything: the task fails
        status = f"count_units failed: {type(exc).__name__}: {exc}"
        log.warning("run %s task %s: %s\n%s", run.id, task.name, status, traceback.format_exc())
        await store.set_task(run.id, task.name, state="failed", status=status, now_s=now)
        return "failed"
    async with store.transaction() as conn:
        await store.start_task(run.id, task.name, units, now, conn=conn)
        await store.set_task(run.id, task.name, resource_key=key.text(), conn=conn)
    log.info("run %s task %s started with %d units", run.id, task.name, units)
    return "running"


async def failure_message(store: RunStore, run_id: str) -> str:
    """The message of a failed run: its failed units, and the status of failed tasks."""
    failed: dict[str, list[int | str]] = defaultdict(list)
    for unit in await store.failures(run_id):
        failed[unit.task].append(unit.key)
    message = decisions.failure_message(failed) if failed else "failed"
    fresh = await store.tasks(run_id)
    extra = [f"{t.name}: {t.status}" for t in fresh if t.state == "failed" and t.status]
    return "; ".join([message, *extra]) if extra else message
