"""Step 4 of the controller: moving runs along. Pure decisions (`startable_tasks`,
`plan_start`, `plan_moves`, `simrun.core.states`) say what moves; `Advance` starts tasks
(counting units in threads), reuses earlier work, moves tasks and ends runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shutil
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simrun.core.clock import Clock
from simrun.core.intake import InputLimits, run_units_problem, unit_count_problem
from simrun.core.layout import StoreLayout
from simrun.core.reuse import (
    UnitsTaken,
    choose,
    choose_units,
    reused_text,
    take_units,
    units_present,
    units_reused_text,
)
from simrun.core.states import ACTIVE_TASK_STATES, TaskCounts, TaskState, next_task_state, run_state
from simrun.plugins import TaskType, UnitOutputs, unchecked_count, unit_outputs
from simrun.resources import resource_key
from simrun.runstore.reads import earlier_tasks
from simrun.runstore.rows import RunRow, TaskRow
from simrun.runstore.store import RunStore
from simrun.service import decisions

log = logging.getLogger(__name__)

#: Told of a task that is done: (run, task).
TaskDone = Callable[[str, str], Awaitable[None]]

#: Tasks one step starts at most (the rest start in the next steps).
START_TASKS_PER_STEP = 200
#: Threads that run ``count_units`` at once at most; a count that hangs keeps its thread.
COUNT_THREADS = 4
#: How long one step waits in all for the counts it asked for (seconds).
COUNT_WAIT_S = 0.5


@dataclass(frozen=True)
class Counted:
    """A count that is known: its value, or why there is none (the task then fails)."""

    value: object = None
    error: str | None = None


class UnitCounter:
    """Runs ``count_units`` in daemon threads (at most `COUNT_THREADS`), calling
    ``on_done(run)`` on the loop when one ends; a count past ``timeout_s`` is given up."""

    def __init__(self, timeout_s: float, on_done: Callable[[str], None]) -> None:
        self.timeout_s = timeout_s
        self.on_done = on_done
        self._futures: dict[tuple[str, str], tuple[concurrent.futures.Future[object], float]] = {}
        self._running = 0
        self._lock = threading.Lock()
        self._deadline = 0.0
        self._fresh: set[int] = set()

    def begin_step(self) -> None:
        """A step begins: it may wait `COUNT_WAIT_S` in all for the counts it starts."""
        self._deadline = time.monotonic() + COUNT_WAIT_S
        self._fresh.clear()

    def is_fresh(self, future: concurrent.futures.Future[object]) -> bool:
        return id(future) in self._fresh

    def wait_left(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def _start(
        self, run_id: str, task_type: TaskType, settings: Mapping[str, Any]
    ) -> concurrent.futures.Future[object]:
        loop = asyncio.get_running_loop()
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def count() -> None:
            try:
                future.set_result(unchecked_count(task_type, settings))
            except BaseException as exc:  # noqa: BLE001  # plugin code: the task fails with it
                future.set_exception(exc)
            finally:
                with self._lock:
                    self._running -= 1
                if not loop.is_closed():
                    loop.call_soon_threadsafe(self.on_done, run_id)

        with self._lock:
            self._running += 1
        threading.Thread(target=count, name=f"simrun-count-{task_type.name}", daemon=True).start()
        return future

    def busy(self) -> bool:
        with self._lock:
            return self._running >= COUNT_THREADS

    def poll(
        self, run_id: str, task: TaskRow, task_type: TaskType, now: float
    ) -> Counted | concurrent.futures.Future[object] | None:
        """`Counted` once known, the future while it runs (started now if need be), None
        when no thread is free."""
        key = (run_id, task.name)
        found = self._futures.get(key)
        if found is None:
            if self.busy():
                return None
            future = self._start(run_id, task_type, task.settings)
            self._fresh.add(id(future))
            found = self._futures[key] = (future, now)
        future, started = found
        if future.done():
            del self._futures[key]
            exc = future.exception()
            if exc is not None:
                log.warning(
                    "run %s task %s: count_units raised\n%s",
                    run_id,
                    task.name,
                    "".join(traceback.format_exception(exc)),
                )
                return Counted(error=f"count_units failed: {type(exc).__name__}: {exc}")
            return Counted(value=future.result())
        if now - started > self.timeout_s:
            del self._futures[key]
            return Counted(
                error=f"count_units of type {task_type.name!r} did not answer within "
                f"{self.timeout_s:g} s (raise it with --count-timeout-s / "
                "SIMRUN_COUNT_TIMEOUT_S); its thread is left to finish"
            )
        return future

    def forget(self, keep_runs: set[str]) -> None:
        """Drop the counts of runs no longer running."""
        for key in [k for k in self._futures if k[0] not in keep_runs]:
            del self._futures[key]


class RunsToAdvance:
    """The runs a step advances: those marked since the last one, or all of them."""

    def __init__(self) -> None:
        self._runs: set[str] = set()
        self._all = True

    def mark(self, run_id: str) -> None:
        self._runs.add(run_id)

    def mark_all(self) -> None:
        self._all = True

    def take(self) -> tuple[bool, set[str]]:
        taken = self._all, self._runs
        self._all, self._runs = False, set()
        return taken


class Advance:
    """The advance step over the runs of ``marks``; ``on_end`` hears of each run that ends,
    ``on_task_done`` of each task done."""

    def __init__(
        self,
        store: RunStore,
        types: Mapping[str, TaskType],
        marks: RunsToAdvance,
        on_end: Callable[[str], None],
        clock: Clock,
        limits: InputLimits | None = None,
        on_task_done: TaskDone | None = None,
        layout: StoreLayout | None = None,
    ) -> None:
        self.store, self.types, self.marks = store, types, marks
        self.on_end, self.clock = on_end, clock
        self.on_task_done = on_task_done
        self.layout = layout
        self.limits = limits or InputLimits()
        self.counter = UnitCounter(self.limits.count_timeout_s, marks.mark)

    async def step(self) -> bool:
        everything, dirty = self.marks.take()
        changed = False
        try:
            running = await self.store.running_runs()
            self.counter.begin_step()
            self.counter.forget({r.id for r in running})
            for run in running:
                if (everything or run.id in dirty) and await self.advance_run(run):
                    changed = True
                    after = await self.store.run(run.id)
                    if after is not None and after.state != "running":
                        self.on_end(run.id)
        except BaseException:
            self.marks.mark_all()
            raise
        return changed

    async def advance_run(self, run: RunRow) -> bool:
        """Start ``run``'s startable tasks (at most `START_TASKS_PER_STEP` a step), move its
        started ones, end it when nothing can progress; True when something changed."""
        store, now = self.store, self.clock.now()
        tasks = await store.tasks(run.id)
        states: dict[str, str] = {t.name: t.state for t in tasks}
        changed = False
        budget = START_TASKS_PER_STEP
        while True:  # a task done in a pass lets the tasks after it start in the next one
            startable = startable_tasks(tasks, states)
            batch = startable[: max(budget, 0)]
            moved, spent, reused = await self._start(run, batch, now)
            states.update(moved)
            changed |= bool(moved)
            budget -= spent
            for name in (n for n, state in moved.items() if state == "done"):
                await self._done(run.id, name)
            if reused:
                continue  # their dependents may start (or be reused) in this step
            if len(startable) > len(batch):
                self.marks.mark(run.id)  # more to start in the next step
            moves = plan_moves(tasks, states, await store.counts(run.id))
            for move in moves:
                if move.make_merge:
                    await store.add_merge_unit(run.id, move.name)
                if move.state != states[move.name]:
                    await store.set_task(run.id, move.name, state=move.state, now_s=now)
                    states[move.name] = move.state
                    if move.state == "done":
                        await self._done(run.id, move.name)
            changed |= bool(moves)
            finished = any(m.state == "done" for m in moves)
            if not finished or budget <= 0:
                if finished:
                    self.marks.mark(run.id)
                break
        outcome = run_state(states, {t.name: t.depends for t in tasks})
        if outcome != "running":
            message = "" if outcome == "succeeded" else await failure_message(store, run.id)
            await store.set_run_state(run.id, outcome, message, now)
            log.info("run %s %s %s", run.id, outcome, message)
            await store.checkpoint()
            changed = True
        return changed

    async def _done(self, run_id: str, task: str) -> None:
        if self.on_task_done is not None:
            await self.on_task_done(run_id, task)

    async def _start(
        self, run: RunRow, batch: list[TaskRow], now: float
    ) -> tuple[dict[str, str], int, bool]:
        """The new state of each task of ``batch`` that moved, the budget spent, and
        whether tasks were reused (then nothing else started)."""
        if not batch:
            return {}, 0, False
        if self.layout is not None:
            reused = await reuse_tasks(self.store, self.layout, run, batch, now)
            if reused:
                return dict.fromkeys(reused, "done"), len(reused), True
        return await self.start_tasks(run, batch, now), len(batch), False

    async def start_tasks(self, run: RunRow, tasks: list[TaskRow], now: float) -> dict[str, str]:
        """Start (or fail) the ``tasks`` whose count is known, in one transaction: the new
        state of each task that moved."""
        store, types = self.store, self.types
        counts = await self._counts(run, tasks)
        in_run = sum(t.units or 0 for t in await store.tasks(run.id))
        taken = {}
        if self.layout is not None:
            taken = await unit_reuse(store, self.layout, types, run, tasks, _known(counts))
        moved: dict[str, str] = {}
        async with store.transaction() as conn:
            for task in tasks:
                plan = plan_start(
                    task, types.get(task.type), counts.get(task.name), in_run, self.limits,
                    run.model,
                )  # fmt: skip
                if plan is None:
                    continue  # still counting
                if plan.failed is not None:
                    log.warning("run %s task %s failed: %s", run.id, task.name, plan.failed)
                    await store.set_task(
                        run.id, task.name, state="failed", status=plan.failed, now_s=now,
                        conn=conn,
                    )  # fmt: skip
                    moved[task.name] = "failed"
                    continue
                units = taken.get(task.name)
                await store.start_task(
                    run.id, task.name, plan.units, now, conn=conn,
                    reused=units.reused if units else (),
                    reused_from=units.earlier.run if units else None,
                )  # fmt: skip
                await store.set_task(run.id, task.name, resource_key=plan.key, conn=conn)
                in_run += plan.units
                moved[task.name] = "running"
                log.info("run %s task %s started with %d units", run.id, task.name, plan.units)
                if units is not None:
                    text = units_reused_text(units.start.reused, units.earlier.run)
                    log.info("run %s task %s: %s", run.id, task.name, text)
        return moved

    async def _counts(self, run: RunRow, tasks: Sequence[TaskRow]) -> dict[str, Counted]:
        """The counts of the splittable ``tasks`` known within this step's wait."""
        counter = self.counter
        splittable = [(t, tt) for t in tasks if (tt := self.types.get(t.type)) and tt.splittable]
        counts: dict[str, Counted] = {}
        waiting: list[concurrent.futures.Future[object]] = []
        for task, task_type in splittable:
            found = counter.poll(run.id, task, task_type, time.monotonic())
            if isinstance(found, Counted):
                counts[task.name] = found
            elif found is not None and counter.is_fresh(found):
                waiting.append(found)
        if waiting and counter.wait_left() > 0:
            # The quick counts are taken in this step; the others when they are known.
            futures = [asyncio.wrap_future(f) for f in waiting]
            await asyncio.wait(futures, timeout=counter.wait_left())
            for task, task_type in splittable:
                if task.name not in counts:
                    found = counter.poll(run.id, task, task_type, time.monotonic())
                    if isinstance(found, Counted):
                        counts[task.name] = found
        return counts


@dataclass(frozen=True)
class TaskMove:
    """A started task's new ``state``, and whether its merge unit is to be made now."""

    name: str
    state: TaskState
    make_merge: bool = False


def startable_tasks(tasks: Sequence[TaskRow], states: Mapping[str, str]) -> list[TaskRow]:
    """The waiting tasks whose inputs are all done, in topological order."""
    return [
        t
        for t in tasks
        if states[t.name] == "waiting" and all(states.get(d) == "done" for d in t.depends)
    ]


def plan_moves(
    tasks: Sequence[TaskRow], states: Mapping[str, str], counts: Mapping[str, TaskCounts]
) -> list[TaskMove]:
    """The moves of the started ``tasks`` whose units say so (`next_task_state`)."""
    moves = []
    for task in tasks:
        state = states[task.name]
        if state in ACTIVE_TASK_STATES:
            new, merge = next_task_state(state, counts.get(task.name, TaskCounts()), task.has_merge)
            if new != state or merge:
                moves.append(TaskMove(task.name, new, merge))
    return moves


async def reuse_tasks(
    store: RunStore, layout: StoreLayout, run: RunRow, tasks: list[TaskRow], now: float
) -> list[str]:
    """Mark done the ``tasks`` that reuse an earlier run's outputs, linked into their out
    directory (`simrun.core.reuse`): the names of those reused."""
    candidates = [t for t in tasks if t.reuse and t.fingerprint is not None]
    if not candidates:
        return []
    done = await store.done_tasks([t.fingerprint for t in candidates if t.fingerprint], run.id)
    reused: list[str] = []
    for task in candidates:
        same = [d for d in done if d.fingerprint == task.fingerprint]
        earlier = await asyncio.to_thread(earlier_tasks, layout, same)
        from_run = choose(False, earlier)
        if from_run is None:
            continue
        source = layout.task_out(from_run, next(d.task for d in same if d.run == from_run))
        target = layout.task_out(run.id, task.name)
        if not await _linked(run.id, task.name, from_run, link_outputs, source, target):
            continue
        await store.reuse_task(run.id, task.name, from_run, reused_text(from_run), now)
        log.info("run %s task %s: %s", run.id, task.name, reused_text(from_run))
        reused.append(task.name)
    return reused


async def _linked(
    run: str, task: str, source_run: str, link: Callable[..., None], *args: Any
) -> bool:
    """Run ``link(*args)`` in a thread; False (logged: the task runs its work) on OSError."""
    try:
        await asyncio.to_thread(link, *args)
    except OSError as exc:
        log.warning("run %s task %s: could not take run %s's work: %s", run, task, source_run, exc)
        return False
    return True


def link_outputs(source: Path, target: Path) -> None:
    """Replace the out directory ``target`` by the files of ``source`` (an earlier run's),
    hard-linked where possible, else copied (blocking I/O)."""
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".reusing")
    if partial.exists():
        shutil.rmtree(partial)
    shutil.copytree(source, partial, symlinks=True, copy_function=_link_or_copy)
    partial.rename(target)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@dataclass(frozen=True)
class TaskStart:
    """How a task starts: with ``units`` under its resource ``key``, or ``failed`` (why)."""

    units: int = 1
    key: str = ""
    failed: str | None = None


def plan_start(
    task: TaskRow,
    task_type: TaskType | None,
    counted: Counted | None,
    in_run: int,
    limits: InputLimits,
    model: str,
) -> TaskStart | None:
    """How ``task`` starts given its count and the units its run has (``in_run``); None
    while it is still counted."""
    if task_type is None:
        return TaskStart(failed=f"task type {task.type!r} is not installed in the service")
    units = 1
    if task_type.splittable:
        if counted is None:
            return None
        problem = counted.error or unit_count_problem(counted.value, task_type.name, limits)
        if problem is not None:
            return TaskStart(failed=problem)
        assert isinstance(counted.value, int)
        units = counted.value
    problem = run_units_problem(in_run, units, task_type.name, limits)
    if problem is not None:
        return TaskStart(failed=problem)
    try:
        key = resource_key(task_type, task.settings, model).text()
    except Exception as exc:  # noqa: BLE001  # plugin code (cost setting) may raise
        return TaskStart(failed=f"resource key failed: {type(exc).__name__}: {exc}")
    return TaskStart(units, key)


def _known(counts: Mapping[str, Counted]) -> dict[str, int]:
    """The counts that are integers (the others fail their task)."""
    return {
        name: c.value
        for name, c in counts.items()
        if c.error is None and isinstance(c.value, int) and not isinstance(c.value, bool)
    }


async def unit_reuse(
    store: RunStore,
    layout: StoreLayout,
    types: Mapping[str, TaskType],
    run: RunRow,
    tasks: Sequence[TaskRow],
    counts: Mapping[str, int],
) -> dict[str, UnitsTaken]:
    """The units the ``tasks`` about to start (``counts``: their units) take from an
    earlier run (`take_units`), their files linked in already."""
    wanted: dict[str, tuple[TaskRow, UnitOutputs]] = {}
    for task in tasks:
        task_type = types.get(task.type)
        declared = unit_outputs(task_type) if task_type is not None else None
        if task.reuse and task.unit_fingerprint and declared and counts.get(task.name):
            wanted[task.name] = (task, declared)
    if not wanted:
        return {}
    done = await store.done_units(
        sorted({t.unit_fingerprint or "" for t, _ in wanted.values()}), run.id
    )
    taken: dict[str, UnitsTaken] = {}
    for name, (task, declared) in wanted.items():
        same = [d.earlier() for d in done if d.unit_fingerprint == task.unit_fingerprint]
        options = []
        for earlier in choose_units(False, same):
            done_ranges = (
                None if earlier.done else await store.done_ranges(earlier.run, earlier.task)
            )
            out = layout.task_out(earlier.run, earlier.task)
            present = await asyncio.to_thread(
                units_present, out, declared, counts[name], earlier.units, done_ranges
            )
            options.append((earlier, present))
        chosen = take_units(counts[name], options)
        if chosen is None:
            continue
        earlier = chosen.earlier
        source, target = layout.task_out(earlier.run, earlier.task), layout.task_out(run.id, name)
        if await _linked(
            run.id, name, earlier.run, link_units, source, target, declared, chosen.reused
        ):
            taken[name] = chosen
    return taken


def link_units(source: Path, target: Path, declared: UnitOutputs, reused: Sequence[range]) -> None:
    """Link (else copy) the declared files of the units ``reused`` from ``source`` into
    ``target`` (blocking I/O)."""
    for part in reused:
        for i in part:
            for rel in declared.paths(i):
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.unlink(missing_ok=True)
                _link_or_copy(str(source / rel), str(dest))


async def failure_message(store: RunStore, run_id: str) -> str:
    """The message of a failed run: its failed units and failed tasks' status."""
    failed: dict[str, list[int | str]] = defaultdict(list)
    for unit in await store.failures(run_id):
        failed[unit.task].append(unit.key)
    message = decisions.failure_message(failed) if failed else "failed"
    fresh = await store.tasks(run_id)
    extra = [f"{t.name}: {t.status}" for t in fresh if t.state == "failed" and t.status]
    return "; ".join([message, *extra]) if extra else message
