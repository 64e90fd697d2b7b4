"""The worker container: an arq worker per queue in one event loop, their jobs run by
`JobHandler`, a heartbeat, a link that rides out Redis outages, and a graceful stop
(SIGTERM/SIGINT: no new jobs, ``grace_s`` for running ones, then kill)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from arq.connections import ArqRedis
from arq.typing import WorkerCoroutine
from arq.worker import func
from redis.exceptions import RedisError

from simrun.config import redact_url
from simrun.core.outage import LinkState
from simrun.core.reports import ReportEntry, WorkerInfo, now_s
from simrun.core.signing import JobCodec, JobKey
from simrun.core.sizing import GIB
from simrun.core.wire import PayloadError
from simrun.queues.client import DEAD_LETTER_RAW_BYTES, quarantine
from simrun.queues.connect import RedisTimeouts, cancel_and_wait, open_redis, wait_for_redis
from simrun.queues.keys import JOB_FUNCTION, Keys
from simrun.worker import proctree
from simrun.worker.admission import AdmissionGate
from simrun.worker.cgroups import CgroupSupport, WorkerCgroups, detect
from simrun.worker.heartbeat import Heartbeat
from simrun.worker.jobs import JobHandler
from simrun.worker.link import LINK_ERRORS, OutageWorker, RedisLink, status_path, write_status
from simrun.worker.pool.processes import ProcessPool
from simrun.worker.scratch import ScratchSpace, room_gb, scratch_root
from simrun.worker.settings import Machine, WorkerSettings
from simrun.worker.spool import MIB, ReportSpool, SpoolBounds

log = logging.getLogger(__name__)
T = TypeVar("T")

#: arq's own bound on a job (ours are the unit timeouts; a job a dead worker held is
#: dispatched again and dropped from arq by the service).
JOB_TIMEOUT_S = 7 * 24 * 3600
KEEP_RESULT_S = 300
MAX_TRIES = 3
HEALTH_CHECK_S = 10


class Refused(dict[str, Any]):
    """A job payload the worker will not run: ``reason`` and ``raw`` (its first bytes). A
    map, as arq packs a job's arguments into its result; only `_deserialize` makes one."""

    @property
    def reason(self) -> str:
        return str(self["reason"])

    @property
    def raw(self) -> bytes:
        return bytes(self["raw"])


def default_worker_id() -> str:
    """``<host>-<pid>-<random>``: unique among the containers of one Redis."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def memory_in_use_gb() -> float:
    """The anonymous memory of this container's processes but its own, in GiB (blocking)."""
    return proctree.anon_bytes_of(proctree.descendants(os.getpid())) / GIB


async def _existing(redis: ArqRedis, items: list[T], key: Callable[[T], str]) -> set[T]:
    """Those of ``items`` whose ``key`` exists in Redis (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for item in items:
            pipe.exists(key(item))
        found = await pipe.execute()
    return {item for item, n in zip(items, found, strict=True) if n}


class WorkerContainer:
    """One ``simrun worker``: `run` it; `request_stop` (or a signal) ends it gracefully."""

    def __init__(
        self, settings: WorkerSettings, machine: Machine, key: JobKey | None = None
    ) -> None:
        """``key`` signs and checks jobs and reports (None: `WorkerSettings.job_key`);
        `JobKeyError` when it cannot be had."""
        self.settings = settings
        self.key = key or settings.job_key()
        self.codec = JobCodec(self.key)
        self.engine = machine.engine
        self.keys = Keys(settings.prefix)
        self.worker_id = settings.worker_id or default_worker_id()
        self.capacity = capacity = machine.capacity
        self.pool = ProcessPool(
            capacity.processes,
            plugins=settings.plugins,
            python_path=tuple(str(Path(p).resolve()) for p in settings.python_path),
            hide_gpus=capacity.gpus > 0,
            unit_log_cap=settings.unit_log_cap,
        )
        #: How the memory of the worker processes is bounded (known once it runs).
        self.isolation = "the process tree"
        self._cgroups: WorkerCgroups | None = None
        self.gate = AdmissionGate(capacity, settings.admission_patience_s)
        #: Kept at exit (for debugging) until a later worker finds this one dead.
        self.scratch = ScratchSpace(scratch_root(settings.scratch, self.worker_id))
        #: The free scratch and the memory in use, as last measured (for the heartbeat).
        self.free_scratch_gb: float | None = None
        self.used_memory_gb: float | None = None
        self.started = now_s()
        self.stopping = False
        self._arq: list[OutageWorker] = []
        self._handler: JobHandler | None = None
        self.spool = ReportSpool(
            settings.local / f"{self.worker_id}.spool.jsonl",
            self.key,
            SpoolBounds(int(settings.spool_memory_mb * MIB), int(settings.spool_mb * MIB)),
        )
        self._stop_task: asyncio.Task[None] | None = None
        self._grace_over = asyncio.Event()
        self._stop_asked = asyncio.Event()

    def info(self) -> WorkerInfo:
        handler = self._handler
        # a job whose report waits in the spool is still this worker's, not lost
        running = (*handler.running.values(), *self.spool.jobs()) if handler else ()
        return WorkerInfo(
            id=self.worker_id,
            queues=self.settings.queue_names,
            memory_gb=self.capacity.memory_gb,
            processes=self.capacity.processes,
            gpus=self.capacity.gpus,
            free_memory_gb=self.gate.free_memory_gb,
            free_processes=self.gate.free_slots,
            running=running,
            host=socket.gethostname(),
            pid=os.getpid(),
            started=self.started,
            updated=now_s(),
            stopping=self.stopping,
            free_scratch_gb=self.free_scratch_gb,
            used_memory_gb=self.used_memory_gb,
        )

    def _arq_worker(
        self, queue: str, pool: ArqRedis, handler: JobHandler, link: RedisLink
    ) -> OutageWorker:
        opts = self.settings
        prefetch = self.capacity.processes if opts.prefetch is None else opts.prefetch
        return OutageWorker(
            link=link,
            functions=[
                func(self._job_function(queue, handler), name=JOB_FUNCTION, max_tries=MAX_TRIES)
            ],
            queue_name=self.keys.queue(queue),
            redis_pool=pool,
            burst=opts.burst,
            handle_signals=False,
            max_jobs=self.capacity.processes + max(0, prefetch),
            job_timeout=JOB_TIMEOUT_S,
            keep_result=KEEP_RESULT_S,
            poll_delay=opts.poll_delay_s,
            max_tries=MAX_TRIES,
            health_check_interval=HEALTH_CHECK_S,
            job_serializer=self.codec.serialize,
            job_deserializer=self._deserialize,
            log_results=False,
            ctx={"queue": queue},  # the job's source, named when it is refused
        )

    def _deserialize(self, blob: bytes) -> dict[str, Any]:
        """arq's job of a payload; one that is unsigned, signed with another key or not
        msgpack becomes a call of the job function with a `Refused` (arq would log a
        traceback and tell no one)."""
        try:
            return self.codec.deserialize(blob)
        except PayloadError as exc:
            refused = Refused(reason=str(exc), raw=blob[:DEAD_LETTER_RAW_BYTES])
            return {"f": JOB_FUNCTION, "a": (refused,), "k": {}, "t": None, "et": 0}

    def _job_function(self, queue: str, handler: JobHandler) -> WorkerCoroutine:
        """The job function of ``queue``'s arq worker: `JobHandler.handle`, or the refusal
        of a payload `_deserialize` refused, logged with its source and moved aside."""

        async def job(ctx: Mapping[str, Any], payload: object) -> dict[str, Any]:
            if not isinstance(payload, Refused):
                return await handler.handle(ctx, payload)
            source = f"queue {queue}, arq job {ctx.get('job_id')}"
            log.error("refused a job (%s): %s", source, payload.reason)
            try:
                await quarantine(
                    handler.redis, self.keys, "job", payload.reason, payload.raw, source
                )
            except LINK_ERRORS as exc:
                log.warning("cannot move the refused job aside: %s", exc)
            return {"error": payload.reason}

        return job

    def _client(self) -> ArqRedis:
        """A client of Redis with the worker's timeouts (no I/O yet)."""
        t = self.settings.redis_timeout_s
        return open_redis(self.settings.redis_url, RedisTimeouts(connect_s=t, socket_s=t), self.key)

    async def _wait_for_redis(self, redis: ArqRedis) -> bool:
        """Wait until Redis answers (True) or a stop is asked (False), the status file telling
        the health check; `RedisUnusable` when it never will answer."""
        where = redact_url(self.settings.redis_url)
        status = status_path(self.settings.local, self.worker_id)

        def on_try(state: LinkState) -> None:
            write_status(status, where=where, prefix=self.settings.prefix, state=state,
                         kept_reports=0)  # fmt: skip

        waiting = asyncio.ensure_future(
            wait_for_redis(
                redis,
                where,
                max_wait_s=self.settings.redis_wait_s,
                max_backoff_s=self.settings.redis_retry_max_s,
                on_try=on_try,
            )
        )
        stopped = asyncio.ensure_future(self._stop_asked.wait())
        try:
            await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, stopped):
                await cancel_and_wait(task)
            status.unlink(missing_ok=True)
        if waiting.cancelled():
            log.info("stopped while waiting for Redis at %s", where)
            return False
        waited = waiting.result()  # raises RedisUnusable
        if waited is not None:
            log.info("connected to Redis at %s after %.1f s", where, waited)
        return True

    async def run(self, handle_signals: bool = False) -> None:
        """Serve until the queues are empty (burst) or a stop has run its course; `PoolError`
        when the worker processes cannot start, `RedisUnusable` when Redis never will."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            await asyncio.to_thread(self._open_cgroups)
            await self.pool.start()
            redis = self._client()
            try:
                if await self._wait_for_redis(redis):
                    await self._serve(redis)
            finally:
                await redis.aclose()
        finally:
            await self.pool.close()
            if self._cgroups is not None:
                await asyncio.to_thread(self._cgroups.close)
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

    def _open_cgroups(self) -> None:
        """Give the pool a memory cgroup per worker process where the kernel allows it."""
        if self.settings.cgroups == "off":
            support = CgroupSupport(None, False, "turned off (--cgroups off)")
        else:
            support = detect()
        self.pool.outer = support.own
        if support.usable and support.own is not None:
            try:
                self._cgroups = WorkerCgroups.open(support.own)
            except OSError as exc:
                support = CgroupSupport(support.own, False, f"cannot make the worker's: {exc}")
        self.pool.cgroups = self._cgroups
        self.isolation = support.describe()

    async def _remove_dead_scratch(self, redis: ArqRedis) -> None:
        """Remove the scratch of workers gone (an emptyDir outlives a container's restart)."""

        async def alive(ids: list[str]) -> set[str]:
            return await _existing(redis, ids, self.keys.worker)

        try:
            gone = await self.scratch.remove_dead(alive)
        except LINK_ERRORS as exc:
            log.warning("cannot tell which scratch directories are of live workers: %s", exc)
            gone = 0
        if gone:
            log.info("removed the scratch of %d worker(s) gone", gone)

    async def _serve(self, redis: ArqRedis) -> None:
        await self._remove_dead_scratch(redis)
        self.free_scratch_gb = await asyncio.to_thread(self._scratch_room)

        async def xadd(entry: ReportEntry) -> None:
            await redis.xadd(self.keys.reports, entry.to_fields(self.key))  # type: ignore[arg-type]

        link = RedisLink(
            redis,
            redact_url(self.settings.redis_url),
            self.spool,
            xadd,
            max_backoff_s=self.settings.redis_retry_max_s,
            status=status_path(self.settings.local, self.worker_id),
            prefix=self.settings.prefix,
        )
        handler = self._handler = JobHandler(
            redis=redis, keys=self.keys, worker_id=self.worker_id, capacity=self.capacity,
            gate=self.gate, pool=self.pool, link=link, settings=self.settings,
            engine=self.engine, scratch=self.scratch,
        )  # fmt: skip
        heartbeat = Heartbeat(
            redis,
            self.keys,
            self.info,
            interval_s=self.settings.heartbeat_s,
            ttl_s=self.settings.ttl_s,
            link=link,
        )
        link.on_back = heartbeat.beat
        loops: list[asyncio.Task[None]] = []
        try:
            for queue in self.settings.queue_names:
                pool = self._client()
                link.pools.append(pool)
                self._arq.append(self._arq_worker(queue, pool, handler, link))
            await heartbeat.beat()
            await link.learn_server()
            link.write_status()
            loops.append(asyncio.create_task(heartbeat.run()))
            loops.append(asyncio.create_task(self._upkeep_loop(redis, link)))
            cap = self.capacity
            log.info(
                "worker %s serving %s with %g GiB, %d processes, %d GPUs; memory bounded by %s; "
                "jobs signed with the key of %s (fingerprint %s)",
                self.worker_id, ", ".join(self.settings.queue_names), cap.memory_gb,
                cap.processes, cap.gpus, self.isolation, self.key.where, self.key.fingerprint,
            )  # fmt: skip
            if not self.stopping:  # a stop asked for while starting up ends it here
                results = await asyncio.gather(
                    *(self._run_arq(w, link) for w in self._arq), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, BaseException) and not isinstance(
                        result, asyncio.CancelledError
                    ):
                        raise result
            if self._stop_task is not None:
                await self._stop_task
        finally:
            for task in loops:
                await cancel_and_wait(task)
            for worker in self._arq:
                with contextlib.suppress(*LINK_ERRORS):
                    await worker.close()
            await self._deliver_kept(link)
            await link.close()
            with contextlib.suppress(RedisError, OSError):
                await heartbeat.clear(self.worker_id)
            self.spool.discard()

    async def _upkeep_loop(self, redis: ArqRedis, link: RedisLink) -> None:
        """Every heartbeat interval: remove the scratch of tasks that ended, and measure the
        free scratch and the memory in use for the heartbeat."""

        async def ended(tasks: list[tuple[str, str]]) -> set[tuple[str, str]]:
            if not link.is_up:
                return set()
            return await _existing(redis, tasks, lambda t: self.keys.task_ended(*t))

        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            try:
                removed = await self.scratch.sweep(ended)
            except LINK_ERRORS as exc:
                link.lost(exc)
                removed = 0
            except Exception:  # a bug here must not end the sweeps (nor the container)
                log.exception("the sweep of the local scratch failed; trying again later")
                removed = 0
            if removed:
                log.info("removed the local scratch of %d task(s) that ended", removed)
            self.free_scratch_gb = await asyncio.to_thread(self._scratch_room)
            self.used_memory_gb = await asyncio.to_thread(memory_in_use_gb)

    def _scratch_room(self) -> float | None:
        """The scratch this worker advertises (blocking)."""
        return room_gb(self.scratch.free_gb(), self.scratch.held_bytes() / GIB)

    async def _run_arq(self, worker: OutageWorker, link: RedisLink) -> None:
        """Run an arq worker, again once Redis answers when it ended on a Redis error."""
        while True:
            if self.stopping:
                # A stop asked for before arq's main task exists would not end it (arq's
                # handle_sig cancels only a main task it has): do not start it then.
                return
            try:
                await worker.async_run()
                return
            except LINK_ERRORS as exc:
                if self.stopping:
                    raise
                link.lost(exc)
                await link.wait_up()
                log.info("arq worker of %s started again", worker.queue_name)

    async def _deliver_kept(self, link: RedisLink) -> None:
        """At the end: give Redis the grace period to come back for the reports kept."""
        if not len(self.spool):
            return
        if not link.is_up:
            log.warning(
                "stopping with %d reports kept: waiting up to %g s for Redis",
                len(self.spool), self.settings.grace_s,
            )  # fmt: skip
            await link.wait_up(self.settings.grace_s)
        if len(self.spool):
            with contextlib.suppress(*LINK_ERRORS):
                await self.spool.deliver(link.write)
        if len(self.spool):
            log.error(
                "%d reports could not be delivered (Redis away): the service will dispatch "
                "their units again",
                len(self.spool),
            )

    def request_stop(self) -> None:
        """Begin a graceful stop; called again, end the grace period now."""
        if self.stopping:
            log.warning("second stop request: ending the grace period now")
            self._grace_over.set()
            return
        self.stopping = True
        self._stop_asked.set()
        log.info("stopping: no new jobs, %g s of grace for the running ones", self.settings.grace_s)
        self._stop_task = asyncio.get_running_loop().create_task(self._stop())

    async def _wait_jobs(self, timeout_s: float, grace: bool) -> bool:
        """Wait until no job is in flight (True), or ``timeout_s`` passed or the grace ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(not t.done() for w in self._arq for t in w.tasks.values()):
            if loop.time() >= deadline or (grace and self._grace_over.is_set()):
                return False
            await asyncio.sleep(0.05)
        return True

    async def _stop(self) -> None:
        for worker in self._arq:
            worker.allow_pick_jobs = False
        self.gate.close()
        if not await self._wait_jobs(self.settings.grace_s, grace=True):
            handler = self._handler
            if handler is not None:
                handler.stop_now = True
                handler.stop_commands()
            killed = self.pool.kill_busy("stop")
            log.warning("grace period over: killed %d busy worker processes", killed)
            if not await self._wait_jobs(60.0, grace=False):
                log.error("jobs did not end within 60 s of their processes being killed")
        for worker in self._arq:
            worker.handle_sig(signal.SIGTERM)
        # arq cancels its main task once; a cancellation lost in a Redis write
        # (`cancel_and_wait`) would leave it polling for ever.
        await asyncio.gather(
            *(cancel_and_wait(w.main_task) for w in self._arq if w.main_task is not None)
        )


def run_container(settings: WorkerSettings, machine: Machine, handle_signals: bool = True) -> None:
    """Run a worker container in a new event loop until it ends."""
    asyncio.run(WorkerContainer(settings, machine).run(handle_signals=handle_signals))
