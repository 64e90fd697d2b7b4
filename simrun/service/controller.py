"""The controller: each `Controller.step` ingests reports, watches workers, reconciles,
advances runs, dispatches and forgets ended runs' attempts (a module each); this module owns
the connections, the loop (which waits out Redis outages) and the commands."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from redis.exceptions import RedisError

from simrun.config import redact_url
from simrun.core.clock import SYSTEM_CLOCK, Clock, Every
from simrun.core.intake import tasks_problem
from simrun.core.layout import StoreLayout
from simrun.core.outage import RECONNECT_MAX_S, LinkState, backoff_s
from simrun.plugins import TaskType
from simrun.queues.client import JobQueue, forget_attempts, set_current_attempts
from simrun.queues.connect import RedisUnusable, cancel_and_wait, wait_for_redis
from simrun.resources import ResourceStore
from simrun.runstore.store import RunStore
from simrun.service import decisions
from simrun.service.advance import Advance, RunsToAdvance
from simrun.service.changes import Changes
from simrun.service.dispatch import Dispatcher, ResolveCache
from simrun.service.forget import EndedRuns
from simrun.service.ingest import Ingest, is_oom
from simrun.service.liveness import HealthSnapshot, Liveness
from simrun.service.outputs import clear_outputs
from simrun.service.queries import RunQueries
from simrun.service.scratch import mark_task_ended, remove_scratch, unmark_tasks_ended
from simrun.service.settings import ControllerSettings
from simrun.service.submit import (
    Leftovers,
    copy_sources,
    new_run_id,
    plan_run,
    remove_leftovers,
    remove_run_dir,
    run_dir_names,
    stale_run_dirs,
    upload_leftovers,
    upload_staging,
)
from simrun.service.volumes import NoSpace, Volume, full_volume, is_no_space, low_space, space_line
from simrun.workflow import Problem, Workflow, WorkflowError, source_paths, uploaded_sources

#: The spec names `is_oom` here; it is decided where reports are read (`ingest`).
__all__ = ["is_oom"]

log = logging.getLogger(__name__)

#: Seconds between two looks at the Redis server's ``run_id`` (a restart loses its data).
SERVER_CHECK_S = 1.0
#: Seconds between two looks at the free space of the store's and the database's volumes.
SPACE_CHECK_S = 3.0
#: Seconds between two log lines of a volume that stays full.
SPACE_LOG_S = 60.0


class Claim(Protocol):
    """What a service holds while it drives its Redis namespace (`service.main.RedisClaim`),
    kept by the loop every `every_s`."""

    @property
    def every_s(self) -> float:
        """Seconds between two refreshes."""

    async def keep(self) -> None:
        """Take it, or refresh it; a `RedisUnusable` when another service holds it."""


class Controller:
    """The service's controller over its stores and queue: `open` it, drive it with
    `run_forever` (or `step`); commands may run meanwhile."""

    def __init__(
        self,
        settings: ControllerSettings,
        types: Mapping[str, TaskType],
        store: RunStore,
        resources: ResourceStore,
        queue: JobQueue,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.types = dict(types)
        self.store = store
        self.resources = resources
        self.queue = queue
        self.clock = clock
        self._lock = asyncio.Lock()
        #: The error of the last step, None after a step that went well.
        self.last_error: str | None = None
        self._space_check = Every(clock, SPACE_CHECK_S)
        self._space_log = Every(clock, SPACE_LOG_S)
        self._space_failed_s = -float("inf")  # when a write last found no room (monotonic)
        #: The link to Redis as the loop found it (times on the clock's monotonic scale).
        self.link = LinkState()
        self._server_id: str | None = None
        self._server_check = Every(clock, SERVER_CHECK_S)
        self._grace_s = decisions.reconnect_grace_s(settings.heartbeat_ttl_s, RECONNECT_MAX_S)
        self._marks = RunsToAdvance()  # runs whose tasks may move
        resolved = ResolveCache()  # emptied of a key by the ingest when it learns
        self._ended = EndedRuns(clock)  # runs whose attempts hashes may go
        #: Raised attempts of cancelled runs not written yet (Redis was away at the cancel).
        self._owed_attempts: dict[str, dict[str, dict[int | str, int]]] = {}
        self._ingest = Ingest(settings, store, resources, queue, self._marks, resolved, clock)
        self._liveness = Liveness(settings, store, queue, self._ingest, self._marks, clock)
        self._advance = Advance(
            store,
            self.types,
            self._marks,
            self._ended.watch,
            clock,
            settings.intake,
            self._task_done,
            layout=StoreLayout(settings.store),
        )
        self._dispatcher = Dispatcher(
            store, resources, queue, self.types, settings, resolved, clock
        )
        #: The read side: what the HTTP API, the metrics and the store reader ask.
        self.queries = RunQueries(store, resources, queue, self.types, settings, clock)
        #: Who follows a run is woken here when it may have changed (`simrun.service.changes`).
        self.changes = Changes()
        #: Set by a command (submit, replay, cancel): the idle loop steps at once.
        self._wake = asyncio.Event()
        #: What ``GET /health`` answers from: refreshed by each step (None before the first).
        self.health: HealthSnapshot | None = None
        #: Problems other code sets and clears (a name such as "disk" → one line): while
        #: any is set, /health says degraded and lists them.
        self.problems: dict[str, str] = {}
        self._claim: Claim | None = None
        self._claim_every = Every(clock, 1.0)

    @classmethod
    async def open(
        cls,
        settings: ControllerSettings,
        types: Mapping[str, TaskType],
        clock: Clock = SYSTEM_CLOCK,
    ) -> Controller:
        """Open the stores and a client of Redis (not connected yet)."""
        store = await RunStore.open(settings.database)
        try:
            resources = ResourceStore(settings.database)
            await resources.ensure_schema(store.connection)
            # No I/O: the loop makes the first contact (`run_forever`), while the API answers.
            key = await asyncio.to_thread(settings.job_key)
            log.info("jobs signed with the key of %s (fingerprint %s)", key.where, key.fingerprint)
            queue = await JobQueue.connect(
                settings.redis_url, settings.prefix, settings.redis_timeouts, key=key, wait=False
            )
        except BaseException:
            await store.close()
            raise
        controller = cls(settings, types, store, resources, queue, clock)
        try:
            await controller.sweep_leftovers()
        except OSError as exc:  # the start goes on: the leftovers only take room
            log.warning("cannot look for what interrupted submissions left: %s", exc)
        return controller

    async def sweep_leftovers(self) -> Leftovers:
        """Remove what submissions killed midway left (one log line when there was any):
        upload directories no submission wrote to for `UPLOAD_LEFTOVER_S`, and directories
        under the store's ``runs/`` named as a run id, without a run, not written to for
        `RUN_LEFTOVER_S` (file ages are of the file system's clock)."""
        now_s = time.time()
        layout = StoreLayout(self.settings.store)
        staging = upload_staging()
        uploads = await asyncio.to_thread(upload_leftovers, staging, now_s)
        names = [
            name
            for name in await asyncio.to_thread(run_dir_names, layout)
            if not await self.queries.exists(name)
        ]
        runs = await asyncio.to_thread(stale_run_dirs, layout, names, now_s)
        done = await asyncio.to_thread(remove_leftovers, uploads, runs)
        if done.uploads or done.runs or done.kept:
            log.warning("%s", done.line(staging, layout.runs))
        return done

    async def close(self) -> None:
        """Close Redis and both stores (no WAL file is left behind)."""
        await self.queue.close()
        await self.store.close()
        self.resources.close()

    def hold(self, claim: Claim) -> None:
        """Keep ``claim`` while the loop runs: once Redis answers, then every
        ``claim.every_s``; the loop ends with its `RedisUnusable` when another holds it."""
        self._claim, self._claim_every = claim, Every(self.clock, claim.every_s)

    async def _keep_claim(self) -> None:
        if self._claim is None or not self._claim_every.due():
            return
        try:
            await self._claim.keep()
        except (RedisError, OSError):
            self._claim_every.reset()  # Redis is away: again at the next round
            raise

    async def _task_done(self, run: str, task: str) -> None:
        """A task is done: its scratch goes, on the workers and in the store."""
        await mark_task_ended(self.queue.redis, self.queue.keys, run, task)
        await asyncio.to_thread(remove_scratch, self.settings.store, run, task)

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Step until ``stop`` is set, waiting out Redis with backoff; any other error of a
        step is logged and kept in ``last_error``, and the loop goes on after a pause."""
        stop = stop or asyncio.Event()
        if not await self._first_contact(stop):
            return
        while not stop.is_set():
            pause = self.settings.poll_s
            try:
                await self._keep_claim()
                busy = await self._step_noting_space()
                self.last_error = None
                away = self.link.back(self.clock.monotonic())
                if away is not None:
                    self._redis_back(f"Redis is back after {away:.1f} s")
            except RedisUnusable:
                raise  # another service holds the namespace (`hold`): the loop ends
            except NoSpace as exc:  # one line a period (`no_space`), no traceback
                self.last_error = str(exc)
                busy, pause = False, max(pause, SPACE_CHECK_S)
            except (RedisError, OSError) as exc:
                if self.link.lost(self.clock.monotonic(), str(exc)):
                    log.warning(
                        "lost Redis at %s (%s): the API answers from SQLite; trying again "
                        "with backoff",
                        redact_url(self.settings.redis_url),
                        exc,
                    )
                self.last_error = f"Redis unreachable: {exc}"
                self.health = HealthSnapshot(False, 0, self.clock.monotonic())
                wait = backoff_s(self.link.failures, random.random())
                busy, pause = False, max(pause, wait)
            except Exception as exc:  # kept, logged, and the loop goes on
                log.exception("controller step failed")
                self.last_error = f"{type(exc).__name__}: {exc}"
                busy, pause = False, max(pause, 1.0)
            if self._space_check.due():
                await self.check_space()
            if not busy:
                await self._idle(
                    stop, pause, reports=self.link.up and pause <= self.settings.poll_s
                )

    async def _step_noting_space(self) -> bool:
        """`step`, a write of it that found its volume full raised as `NoSpace`."""
        try:
            return await self.step()
        except Exception as exc:
            if is_no_space(exc):
                raise await self.no_space(exc, "the controller's step") from exc
            raise

    def volumes(self, *more: Volume) -> list[Volume]:
        """The directories the service writes to (the store, the database's, ``more``)."""
        found = [Volume("the store", self.settings.store)]
        if not self.settings.database.parent.is_relative_to(self.settings.store):
            found.append(Volume("the database's directory", self.settings.database.parent))
        return [*found, *more]

    async def no_space(self, exc: BaseException, doing: str) -> NoSpace:
        """``exc``, a write that found its volume full while ``doing``, as a `NoSpace`
        naming the volume; ``problems["disk"]`` says so until space is back
        (`check_space`), logged once a `SPACE_LOG_S`."""
        if isinstance(exc, NoSpace):
            return exc
        staging = Volume("the directory of uploads", upload_staging())
        line = await asyncio.to_thread(lambda: space_line(full_volume(exc, self.volumes(staging))))
        self.problems["disk"] = f"no space left: {line}"
        self._space_failed_s = self.clock.monotonic()
        if self._space_log.due():
            log.warning("no space left (%s failed: %s): %s", doing, exc, line)
        return NoSpace(f"no space left: {line}; {doing} was not done, nothing of it is kept")

    async def check_space(self) -> None:
        """Look at the free space of the store's volumes: ``problems["disk"]`` while one is
        below `LOW_SPACE_BYTES`, gone (and logged) once there is room again and no write
        found none for a `SPACE_CHECK_S` (a write larger than the room left fails on)."""
        line = await asyncio.to_thread(low_space, self.volumes())
        if line is not None:
            if "disk" not in self.problems or self._space_log.due():
                log.warning("%s", line)
            self.problems["disk"] = line
        elif self.clock.monotonic() - self._space_failed_s < SPACE_CHECK_S:
            return
        elif self.problems.pop("disk", None) is not None:
            self._space_log.reset()
            log.info("space is back: %s", await asyncio.to_thread(space_line, self.volumes()[0]))

    async def _idle(self, stop: asyncio.Event, pause_s: float, reports: bool) -> None:
        """Wait up to ``pause_s``, less on ``stop``, a command or (``reports``) a new report."""
        waits: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self._wake.wait()),
        ]
        if reports:
            waits.append(
                asyncio.ensure_future(self.queue.wait_report(self._ingest.last_id, pause_s))
            )
        try:
            await asyncio.wait(waits, timeout=pause_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                await cancel_and_wait(w)
        self._wake.clear()
        for w in waits:
            if w.done() and not w.cancelled() and w.exception() is not None:
                # A Redis error of the wait: the next step meets it and says so.
                log.debug("waiting for a report: %s", w.exception())

    async def _first_contact(self, stop: asyncio.Event) -> bool:
        """Wait for Redis before the first step (False: ``stop`` was set meanwhile); after a
        wait the workers get the grace of a reconnection."""
        where = redact_url(self.settings.redis_url)

        def on_try(state: LinkState) -> None:
            self.link.lost(self.clock.monotonic(), state.reason)
            self.last_error = f"Redis unreachable: {state.reason}"

        waiting = asyncio.ensure_future(
            wait_for_redis(
                self.queue.pool, where, max_wait_s=self.settings.redis_wait_s, on_try=on_try
            )
        )
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, stopped):
                await cancel_and_wait(task)
        if waiting.cancelled():
            return False
        waited = waiting.result()  # raises RedisUnusable
        self.last_error = None
        if waited is not None:
            self.link.back(self.clock.monotonic())
            self._redis_back(f"connected to Redis at {where} after {waited:.1f} s")
        return True

    def _redis_back(self, what: str) -> None:
        """Redis answers again (or restarted): judge no worker for the grace period."""
        self.link.back_at = self.clock.monotonic()
        self._liveness.redis_back()
        self._ingest.redis_back()
        log.warning("%s: workers are judged by their heartbeats again in %g s", what, self._grace_s)

    async def _check_server(self) -> None:
        """Notice a restart of the Redis server between two steps (its ``run_id``)."""
        if not self._server_check.due():
            return
        server = await self.queue.server_id()
        if self._server_id is not None and server != self._server_id and self.link.up:
            self._redis_back("Redis restarted (it may have lost its data)")
        self._server_id = server

    def redis_down_s(self) -> float | None:
        """Seconds since the loop lost Redis, or None while it reaches it."""
        return self.link.down_for(self.clock.monotonic())

    async def step(self) -> bool:
        """One round of the loop; True when it changed something."""
        async with self._lock:
            await self._check_server()
            await self._write_owed_attempts()
            judge = self.link.up and decisions.judging_workers(
                self.clock.monotonic(), self.link.back_at, self._grace_s
            )
            workers = await self.queue.live_workers()
            self.health = HealthSnapshot(True, len(workers), self.clock.monotonic())
            busy = await self._ingest.step()
            busy |= await self._liveness.watch(workers, judge=judge)
            if judge and self._liveness.reconcile_every.due():
                busy |= await self._liveness.reconcile()
            busy |= await self._advance.step()
            busy |= await self._dispatcher.dispatch(workers)
            if self._ended.sweep_every.due():
                await self._ended.sweep(self.store, self.queue, workers)
            if busy:
                self.changes.notify_all()
            return busy

    async def forget_ended(self) -> int:
        """Delete the attempts hashes of ended runs with no job left in Redis, now."""
        async with self._lock:
            return await self._ended.sweep(self.store, self.queue, await self.queue.live_workers())

    async def submit(
        self,
        doc: Workflow,
        settings_by_task: Mapping[str, dict[str, Any]],
        text: str,
        *,
        base: Path | None = None,
        uploaded: Mapping[str, Path] | None = None,
        reuse: bool = True,
        rerun: Sequence[str] = (),
    ) -> str:
        """Create a run of a checked document, its sources ``uploaded`` or under ``base``: its
        id. `WorkflowError` leaves nothing behind; ``reuse`` and ``rerun`` rule reuse."""
        now = self.clock.now()
        if (why := tasks_problem(len(doc.tasks), self.settings.intake)) is not None:
            raise WorkflowError([Problem(("tasks",), why)], "workflow")
        if uploaded is not None:
            sources = uploaded_sources(doc, uploaded)
        else:
            sources = await asyncio.to_thread(source_paths, doc, base)
        run_id = new_run_id(now)
        layout = StoreLayout(self.settings.store)
        run_dir = layout.run_dir(run_id)
        new = await asyncio.to_thread(
            plan_run,
            run_id,
            doc,
            settings_by_task,
            self.types,
            layout,
            sources,
            text,
            now,
            reuse=reuse,
            rerun=rerun,
            environment_image=self.settings.environment_image,
        )
        try:
            await asyncio.to_thread(copy_sources, layout, run_id, sources)
            async with self._lock:
                await self.store.create_run(new)
                self._moved(run_id)
        except BaseException as exc:
            await asyncio.to_thread(remove_run_dir, run_dir)
            if isinstance(exc, Exception) and is_no_space(exc):
                raise await self.no_space(exc, "the submission") from exc
            raise
        count = len(new.tasks)
        log.info("run %s submitted: %d task%s", run_id, count, "" if count == 1 else "s")
        return run_id

    async def replay(
        self,
        run_id: str,
        task: str | None = None,
        indices: Sequence[int] = (),
        memory_gb: float | None = None,
    ) -> int:
        """Put failed units back (all, of one task, or some indices) and let the run go on:
        the units replayed."""
        async with self._lock:
            count = await self.store.replay(
                run_id, self.clock.now(), task=task, indices=indices, memory_gb=memory_gb
            )
            self._moved(run_id)
        log.info("run %s: %d units replayed", run_id, count)
        return count

    async def rerun(
        self, run_id: str, task: str, memory_gb: float | None = None
    ) -> tuple[list[str], int]:
        """Run ``task`` and every task that reads it again from the start: those tasks and
        the units they had."""
        async with self._lock:
            tasks, units = await self.store.rerun(run_id, task, self.clock.now(), memory_gb)
            await asyncio.to_thread(clear_outputs, self.settings.store, run_id, tasks)
            try:
                await forget_attempts(self.queue.redis, self.queue.keys, run_id, tasks)
            except RedisError as exc:  # a unit whose old attempt stays is dispatched again
                log.warning("run %s: the attempts of %s stay in Redis (%s)", run_id, tasks, exc)
            await unmark_tasks_ended(self.queue.redis, self.queue.keys, run_id, tasks)
            self._moved(run_id)
        log.info("run %s: tasks %s run again (%d units before)", run_id, tasks, units)
        return tasks, units

    async def cancel(self, run_id: str) -> int:
        """Cancel a running run (workers skip its queued units): the units in flight."""
        async with self._lock:
            active = await self.store.cancel(run_id, self.clock.now())
            self.changes.notify(run_id)
            self._wake.set()
            by_task: dict[str, dict[int | str, int]] = defaultdict(dict)
            for unit in active:
                by_task[unit.task][unit.key] = unit.attempt + 1
            self._owed_attempts[run_id] = dict(by_task)
            try:
                await self._write_owed_attempts()
            except RedisError as exc:
                log.warning(
                    "run %s cancelled while Redis is away (%s): workers are told to skip its "
                    "queued units once it is back",
                    run_id,
                    exc,
                )
            # Its hashes stay until the workers skipped the jobs still queued.
            self._ended.watch(run_id)
        log.info("run %s cancelled (%d units were in flight)", run_id, len(active))
        return len(active)

    def _moved(self, run_id: str) -> None:
        """A command changed ``run_id``: advance it, tell its followers, step at once."""
        self._marks.mark(run_id)
        self.changes.notify(run_id)
        self._wake.set()

    async def _write_owed_attempts(self) -> None:
        """Write the raised attempts of cancelled runs that Redis was away for."""
        for run_id in list(self._owed_attempts):
            by_task = self._owed_attempts[run_id]
            for task in list(by_task):
                await set_current_attempts(
                    self.queue.redis, self.queue.keys, run_id, task, by_task[task]
                )
                del by_task[task]
            del self._owed_attempts[run_id]
