"""The worker container: arq workers on its queues, a pool of worker processes, admission,
a heartbeat, and a graceful stop.

One arq `Worker` per queue (cpu, gpu, image:…) runs in one event loop and hands each job to
`JobHandler`. arq holds up to ``processes + prefetch`` jobs per queue; admission decides
which of them run. arq's settings fit short jobs: a small poll delay, the health check in
seconds, results kept a few minutes (a job id cannot be enqueued again while its result
lives), payloads and results in msgpack, and a job timeout of days, because the time of a
unit is bounded by the worker itself (``timeout_s``), not by arq.

Stopping (SIGTERM or SIGINT, or `WorkerContainer.request_stop`): no job is taken any more;
jobs still waiting for admission are handed back at once; running ones get ``grace_s`` to
finish; then their processes (and commands) are killed and what they had not finished is
reported "not_run". A second signal ends the grace period at once.

Redis going away (a restart, a failover, a partition) does not end the container: its link
(`simrun.worker.link.RedisLink`) notices, the units it holds go on, the reports of the jobs
that end are kept (`simrun.worker.spool.ReportSpool`, in memory and then in a file of the
local directory ``local_dir``), and once Redis answers again they are delivered in order,
arq's bookkeeping of those jobs is done and the heartbeat resumes. The arq workers
(`simrun.worker.arq_worker.OutageWorker`) skip their polls meanwhile; should one end on a
Redis error anyway, it is started again once Redis is back.

Redis not reachable yet when the container starts (containers often start before Redis,
or while it restarts) is waited for with the same backoff (`simrun.queues.connect`), one
line when the wait begins and one when it connected, the status file saying "waiting for
Redis" meanwhile; bad credentials or a bad URL end the container at once. Every client has
bounded socket and connect times (``redis_timeout_s``), so a Redis that stops answering
without closing its connections is noticed like one that went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from arq.connections import ArqRedis
from arq.worker import func
from redis.exceptions import RedisError

from simrun.config import DEFAULT_REDIS_URL, DEFAULT_STORE, redact_url
from simrun.core.outage import RECONNECT_MAX_S, REDIS_TIMEOUT_S, LinkState
from simrun.core.reports import WorkerInfo, now_s
from simrun.core.sizing import image_queue
from simrun.core.timing import DEFAULT_GRACE_S, HEARTBEAT_S, HEARTBEAT_TTL_S, TTL_PER_INTERVAL
from simrun.core.wire import deserialize, serialize
from simrun.queues.connect import RedisTimeouts, cancel_and_wait, open_redis, wait_for_redis
from simrun.queues.keys import DEFAULT_PREFIX, JOB_FUNCTION, Keys
from simrun.worker import proctree
from simrun.worker.admission import AdmissionGate
from simrun.worker.arq_worker import OutageWorker
from simrun.worker.capacity import Capacity, detect_capacity
from simrun.worker.cgroups import CgroupSupport, WorkerCgroups, detect
from simrun.worker.engine import EngineError, find_engine
from simrun.worker.heartbeat import Heartbeat
from simrun.worker.jobs import JobHandler
from simrun.worker.link import (
    DEFAULT_LOCAL_DIR as DEFAULT_LOCAL_DIR,
)
from simrun.worker.link import (
    LINK_ERRORS,
    RedisLink,
    status_path,
    write_status,
)
from simrun.worker.pool.output import DEFAULT_COMMAND_LOG_CAP as DEFAULT_COMMAND_LOG_CAP
from simrun.worker.pool.output import DEFAULT_UNIT_LOG_CAP as DEFAULT_UNIT_LOG_CAP
from simrun.worker.pool.processes import ProcessPool
from simrun.worker.scratch import GIB, ScratchSpace, room_gb, scratch_root
from simrun.worker.spool import DEFAULT_DISK_MB, DEFAULT_MEMORY_MB, MIB, ReportSpool, SpoolBounds

log = logging.getLogger(__name__)

#: arq's own bound on a job; ours are the unit timeouts. Also how long arq would keep a job
#: that a dead worker held blocked: the service dispatches its units again with a newer
#: attempt and drops it from arq (`simrun.queues.JobQueue.drop_jobs`).
JOB_TIMEOUT_S = 7 * 24 * 3600
KEEP_RESULT_S = 300
MAX_TRIES = 3
HEALTH_CHECK_S = 10
#: Seconds between two looks at an empty queue.
DEFAULT_POLL_DELAY_S = 0.02
#: The values of ``--cgroups``.
CGROUP_MODES = ("auto", "off")
#: MiB of reports kept on disk while Redis is away (``--spool-mb``).
DEFAULT_SPOOL_MB = DEFAULT_DISK_MB


def default_worker_id() -> str:
    """``<host>-<pid>-<random>``: unique among the containers of one Redis."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How to run one worker container. ``queues`` are logical names (cpu, gpu, image:…);
    ``prefetch`` is how many jobs per queue arq may hold beyond the process slots (None:
    as many as there are slots); ``python_path`` is put in front of the worker processes'
    ``sys.path`` (where ``plugins`` live)."""

    redis_url: str
    capacity: Capacity
    queues: tuple[str, ...] = ("cpu",)
    prefix: str = DEFAULT_PREFIX
    worker_id: str | None = None
    plugins: tuple[str, ...] = ()
    python_path: tuple[str, ...] = ()
    burst: bool = False
    grace_s: float = DEFAULT_GRACE_S
    poll_delay_s: float = DEFAULT_POLL_DELAY_S
    prefetch: int | None = None
    heartbeat_s: float = HEARTBEAT_S
    heartbeat_ttl_s: float = HEARTBEAT_TTL_S
    admission_patience_s: float = 5.0
    store: Path | None = None
    #: "auto": a memory cgroup per worker process where the kernel allows it, else the
    #: process tree; "off": the process tree always (`simrun.worker.cgroups`).
    cgroups: str = "auto"
    #: Bytes one unit may put into the worker's log (head and tail; 0: no bound).
    unit_log_cap: int = DEFAULT_UNIT_LOG_CAP
    local_dir: Path = DEFAULT_LOCAL_DIR
    redis_retry_max_s: float = RECONNECT_MAX_S
    spool_memory_mb: float = DEFAULT_MEMORY_MB
    spool_disk_mb: float = DEFAULT_DISK_MB
    #: Bytes of each log file (stdout, stderr) of a command (head and tail; 0: no bound).
    command_log_cap: int = DEFAULT_COMMAND_LOG_CAP
    #: How long to wait for Redis at start while it is not reachable (None: for ever).
    redis_wait_s: float | None = None
    #: Bound of one Redis call or connection attempt (a Redis that stopped answering).
    redis_timeout_s: float = REDIS_TIMEOUT_S
    #: The container engine's executable that runs the commands of image tasks inside
    #: their image (`simrun.worker.engine`); None: they run in this container.
    engine: str | None = None
    #: The local directory of the tasks' scratch (`simrun.worker.scratch`; None:
    #: ``local_dir / "scratch"``): each container keeps its own ``<worker id>/`` in it.
    scratch_dir: Path | None = None


def memory_in_use_gb() -> float:
    """The anonymous resident memory of this container's processes but its own (the
    worker processes, the commands and their children), in GiB (blocking: walks /proc)."""
    return proctree.anon_bytes_of(proctree.descendants(os.getpid())) / GIB


class WorkerContainer:
    """One ``simrun worker``: `run` it; `request_stop` (or a signal) ends it gracefully."""

    def __init__(self, options: WorkerOptions) -> None:
        if not options.queues:
            raise ValueError("a worker needs at least one queue")
        if options.grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {options.grace_s}")
        if options.cgroups not in CGROUP_MODES:
            raise ValueError(
                f"cgroups must be one of {', '.join(CGROUP_MODES)}, got {options.cgroups!r}"
            )
        if options.unit_log_cap < 0:
            raise ValueError(f"unit_log_cap must be >= 0 bytes, got {options.unit_log_cap}")
        if options.command_log_cap < 0:
            raise ValueError(f"command_log_cap must be >= 0 bytes, got {options.command_log_cap}")
        self.options = options
        self.keys = Keys(options.prefix)
        self.worker_id = options.worker_id or default_worker_id()
        self.capacity = options.capacity
        self.pool = ProcessPool(
            options.capacity.processes,
            plugins=options.plugins,
            python_path=options.python_path,
            hide_gpus=options.capacity.gpus > 0,
            unit_log_cap=options.unit_log_cap,
        )
        #: How the memory of the worker processes is bounded (set when it runs).
        self.isolation = "the process tree"
        self._cgroups: WorkerCgroups | None = None
        self.gate = AdmissionGate(options.capacity, options.admission_patience_s)
        #: A directory of this container's own in the scratch directory (which several
        #: containers may share), kept at exit (what a failed task left, for debugging)
        #: until a worker starting later finds it is not alive (`ScratchSpace.remove_dead`).
        self.scratch = ScratchSpace(
            scratch_root(options.scratch_dir or options.local_dir / "scratch", self.worker_id)
        )
        #: Free space of the scratch directory in GiB, as last measured (the heartbeat's).
        self.free_scratch_gb: float | None = None
        #: The memory its processes hold, as last measured (the heartbeat's).
        self.used_memory_gb: float | None = None
        self.started = now_s()
        self.stopping = False
        self._arq: list[OutageWorker] = []
        self._handler: JobHandler | None = None
        self.spool = ReportSpool(
            options.local_dir / f"{self.worker_id}.spool.jsonl",
            SpoolBounds(int(options.spool_memory_mb * MIB), int(options.spool_disk_mb * MIB)),
        )
        self._link: RedisLink | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._grace_over = asyncio.Event()
        self._stop_asked = asyncio.Event()

    # -- state for the heartbeat ------------------------------------------------------------

    def info(self) -> WorkerInfo:
        handler = self._handler
        # A job whose report waits in the spool is still this worker's: the service must
        # not take it for lost before the report arrives.
        running = (*handler.running.values(), *self.spool.jobs()) if handler else ()
        return WorkerInfo(
            id=self.worker_id,
            queues=self.options.queues,
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

    # -- running -----------------------------------------------------------------------------

    def _arq_worker(
        self, queue: str, pool: ArqRedis, handler: JobHandler, link: RedisLink
    ) -> OutageWorker:
        opts = self.options
        prefetch = self.capacity.processes if opts.prefetch is None else opts.prefetch
        return OutageWorker(
            link=link,
            functions=[func(handler.handle, name=JOB_FUNCTION, max_tries=MAX_TRIES)],
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
            job_serializer=serialize,
            job_deserializer=deserialize,
            log_results=False,
        )

    def _client(self) -> ArqRedis:
        """A client of Redis with the worker's timeouts (no I/O yet)."""
        t = self.options.redis_timeout_s
        return open_redis(self.options.redis_url, RedisTimeouts(connect_s=t, socket_s=t))

    async def _wait_for_redis(self, redis: ArqRedis) -> bool:
        """Wait until Redis answers (True), or a stop is asked meanwhile (False). While it
        is not reachable yet, the status file says so (the health check: "waiting for
        Redis"); `RedisUnusable` when it never will be (or not within ``redis_wait_s``)."""
        where = redact_url(self.options.redis_url)
        status = status_path(self.options.local_dir, self.worker_id)

        def on_try(state: LinkState) -> None:
            write_status(status, where=where, prefix=self.options.prefix, state=state,
                         kept_reports=0)  # fmt: skip

        waiting = asyncio.ensure_future(
            wait_for_redis(
                redis,
                where,
                max_wait_s=self.options.redis_wait_s,
                max_backoff_s=self.options.redis_retry_max_s,
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
        """Serve until the queues are empty (burst) or a stop has run its course.

        Raises `PoolError` when the worker processes cannot start (a ``--plugins``
        reference that does not load) and `RedisUnusable` when Redis will never take the
        worker (bad URL or credentials) or was not reached within ``redis_wait_s``; Redis
        not reachable yet is waited for (for ever by default).
        """
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
        """Give the pool a memory cgroup per worker process where the kernel allows it
        (blocking: reads and writes cgroup files)."""
        if self.options.cgroups == "off":
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

    async def _serve(self, redis: ArqRedis) -> None:
        handler = self._handler = JobHandler(
            redis=redis,
            keys=self.keys,
            worker_id=self.worker_id,
            capacity=self.capacity,
            gate=self.gate,
            pool=self.pool,
            spool=self.spool,
            command_cgroups=self.options.cgroups,
            command_log_cap=self.options.command_log_cap,
            engine=self.options.engine,
            scratch=self.scratch,
        )
        # what workers gone left in the scratch directory (an earlier incarnation of this
        # container: an emptyDir outlives a container's restart) goes

        async def alive(ids: list[str]) -> set[str]:
            async with redis.pipeline(transaction=False) as pipe:
                for other in ids:
                    pipe.exists(self.keys.worker(other))
                found = await pipe.execute()
            return {i for i, n in zip(ids, found, strict=True) if n}

        try:
            gone = await self.scratch.remove_dead(alive)
        except LINK_ERRORS as exc:
            log.warning("cannot tell which scratch directories are of live workers: %s", exc)
            gone = 0
        if gone:
            log.info("removed the scratch of %d worker(s) gone", gone)
        self.free_scratch_gb = await asyncio.to_thread(self._scratch_room)
        link = self._link = handler.link = RedisLink(
            redis,
            redact_url(self.options.redis_url),
            self.spool,
            handler.xadd,
            max_backoff_s=self.options.redis_retry_max_s,
            status=status_path(self.options.local_dir, self.worker_id),
            prefix=self.options.prefix,
        )
        heartbeat = Heartbeat(
            redis,
            self.keys,
            self.info,
            interval_s=self.options.heartbeat_s,
            ttl_s=self.options.heartbeat_ttl_s,
            link=link,
        )
        link.on_back = heartbeat.beat
        heartbeat_task: asyncio.Task[None] | None = None
        scratch_task: asyncio.Task[None] | None = None
        try:
            for queue in self.options.queues:
                pool = self._client()
                link.pools.append(pool)
                self._arq.append(self._arq_worker(queue, pool, handler, link))
            await heartbeat.beat()
            await link.learn_server()
            link.write_status()
            heartbeat_task = asyncio.get_running_loop().create_task(heartbeat.run())
            scratch_task = asyncio.get_running_loop().create_task(self._upkeep_loop(redis, link))
            log.info(
                "worker %s serving %s with %g GiB, %d processes, %d GPUs; memory bounded by %s",
                self.worker_id,
                ", ".join(self.options.queues),
                self.capacity.memory_gb,
                self.capacity.processes,
                self.capacity.gpus,
                self.isolation,
            )
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
            if heartbeat_task is not None:
                await cancel_and_wait(heartbeat_task)
            if scratch_task is not None:
                await cancel_and_wait(scratch_task)
            for worker in self._arq:
                with contextlib.suppress(*LINK_ERRORS):
                    await worker.close()
            await self._deliver_kept(link)
            await link.close()
            with contextlib.suppress(RedisError, OSError):
                await heartbeat.clear(self.worker_id)
            self.spool.discard()

    async def _upkeep_loop(self, redis: ArqRedis, link: RedisLink) -> None:
        """Every heartbeat interval: measure the free scratch space and the memory the
        container's processes hold (for the heartbeat), and remove the scratch of tasks that
        ended or have been idle long (`simrun.worker.scratch.ScratchSpace.sweep`)."""

        async def ended(tasks: list[tuple[str, str]]) -> set[tuple[str, str]]:
            if not link.is_up:
                return set()
            async with redis.pipeline(transaction=False) as pipe:
                for run, task in tasks:
                    pipe.exists(self.keys.task_ended(run, task))
                found = await pipe.execute()
            return {t for t, n in zip(tasks, found, strict=True) if n}

        while True:
            await asyncio.sleep(self.options.heartbeat_s)
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
        """The scratch this worker advertises (`simrun.worker.scratch.room_gb`; blocking)."""
        return room_gb(self.scratch.free_gb(), self.scratch.held_bytes() / GIB)

    async def _run_arq(self, worker: OutageWorker, link: RedisLink) -> None:
        """Run an arq worker; one that ends on a Redis error is started again once Redis
        answers (unless the container stops meanwhile)."""
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
        """At the end: give Redis up to the grace period to come back for the reports still
        kept, then say how many are lost."""
        if not len(self.spool):
            return
        if not link.is_up:
            log.warning(
                "stopping with %d reports kept: waiting up to %g s for Redis",
                len(self.spool),
                self.options.grace_s,
            )
            await link.wait_up(self.options.grace_s)
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
        log.info("stopping: no new jobs, %g s of grace for the running ones", self.options.grace_s)
        self._stop_task = asyncio.get_running_loop().create_task(self._stop())

    def _jobs_in_flight(self) -> int:
        return sum(1 for w in self._arq for t in w.tasks.values() if not t.done())

    async def _wait_jobs(self, timeout_s: float, grace: bool) -> bool:
        """Wait until no job is in flight (True), or ``timeout_s`` has passed (False); with
        ``grace``, a second stop request also ends the wait (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._jobs_in_flight():
            if loop.time() >= deadline or (grace and self._grace_over.is_set()):
                return False
            await asyncio.sleep(0.05)
        return True

    async def _stop(self) -> None:
        for worker in self._arq:
            worker.allow_pick_jobs = False
        self.gate.close()
        if not await self._wait_jobs(self.options.grace_s, grace=True):
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


def run_container(options: WorkerOptions, handle_signals: bool = True) -> None:
    """Run a worker container in a new event loop until it ends."""
    asyncio.run(WorkerContainer(options).run(handle_signals=handle_signals))


def queues_for(queues: Sequence[str], images: Sequence[str]) -> tuple[str, ...]:
    """The logical queues of ``--queue`` and ``--image`` options (cpu when none is given)."""
    names = [*queues, *(image_queue(i) for i in images)]
    return tuple(dict.fromkeys(names)) or ("cpu",)


@dataclass(frozen=True)
class WorkerFlags:
    """The parameters of ``simrun worker`` as its command line gives them, before anything
    is detected: `to_argv` writes them as that command line (the one place that does), and
    `options` turns them into the `WorkerOptions` of a container on this machine.

    The field names and defaults are the click command's (`simrun.cli.worker.worker`), so
    ``WorkerFlags(**ctx.params)`` is what a parsed command line says; None leaves a figure
    to the worker (``memory_gb``, ``processes`` and ``gpus`` are detected, ``prefetch`` is
    the process slots, ``heartbeat_ttl_s`` is `TTL_PER_INTERVAL` heartbeats).
    """

    queues: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    redis_url: str = DEFAULT_REDIS_URL
    prefix: str = DEFAULT_PREFIX
    memory_gb: float | None = None
    processes: int | None = None
    gpus: int | None = None
    worker_id: str | None = None
    burst: bool = False
    grace_s: float = DEFAULT_GRACE_S
    plugins: tuple[str, ...] = ()
    python_path: tuple[str, ...] = ()
    poll_delay_s: float = DEFAULT_POLL_DELAY_S
    prefetch: int | None = None
    heartbeat_s: float = HEARTBEAT_S
    heartbeat_ttl_s: float | None = None
    store: Path = DEFAULT_STORE
    log_level: str = "INFO"
    cgroups: str = "auto"
    unit_log_cap: int = DEFAULT_UNIT_LOG_CAP
    local_dir: Path | None = None
    redis_retry_max_s: float = RECONNECT_MAX_S
    spool_mb: float = DEFAULT_DISK_MB
    command_log_cap: int = DEFAULT_COMMAND_LOG_CAP
    redis_wait_s: float | None = None
    redis_timeout_s: float = REDIS_TIMEOUT_S
    engine: str | None = None
    scratch_dir: Path | None = None

    def to_argv(self) -> list[str]:
        """The arguments of ``simrun worker`` that give these flags. Every value is written
        out, defaults too (a flag left out would be read from the child's environment:
        ``REDIS_URL``, ``SIMRUN_STORE``); a None or False one is left out."""
        argv: list[str] = []
        for field in fields(self):
            value = getattr(self, field.name)
            flag = "--" + _FLAG_NAMES.get(field.name, field.name).replace("_", "-")
            if value is None or value is False:
                continue
            if value is True:
                argv.append(flag)
            elif isinstance(value, tuple | list):
                argv += [a for item in value for a in (flag, str(item))]
            else:
                argv += [flag, repr(value) if isinstance(value, float) else str(value)]
        return argv

    @property
    def ttl_s(self) -> float:
        """How long the heartbeat lives: ``heartbeat_ttl_s``, else `TTL_PER_INTERVAL`
        heartbeats."""
        if self.heartbeat_ttl_s is not None:
            return self.heartbeat_ttl_s
        return TTL_PER_INTERVAL * self.heartbeat_s

    def options(self, environ: Mapping[str, str]) -> WorkerOptions:
        """The options of a container on this machine: its capacity detected where no flag
        gives it (GPUs from ``environ``'s ``CUDA_VISIBLE_DEVICES``). `ValueError` names the
        flag that cannot be used."""
        if not self.ttl_s > self.heartbeat_s or not math.isfinite(self.ttl_s):
            raise ValueError(
                f"--heartbeat-ttl-s: {self.ttl_s:g} s is not longer than --heartbeat-s "
                f"({self.heartbeat_s:g} s): the heartbeat would expire between two beats"
            )
        try:
            capacity = detect_capacity(
                environ, memory_gb=self.memory_gb, processes=self.processes, gpus=self.gpus
            )
        except ValueError as exc:
            raise ValueError(f"capacity: {exc}") from None
        try:
            engine = None if self.engine is None else find_engine(self.engine)
        except EngineError as exc:
            raise ValueError(str(exc)) from None
        return WorkerOptions(
            redis_url=self.redis_url,
            capacity=capacity,
            queues=queues_for(self.queues, self.images),
            prefix=self.prefix,
            worker_id=self.worker_id,
            plugins=self.plugins,
            python_path=tuple(str(Path(p).resolve()) for p in self.python_path),
            burst=self.burst,
            grace_s=self.grace_s,
            poll_delay_s=self.poll_delay_s,
            prefetch=self.prefetch,
            heartbeat_s=self.heartbeat_s,
            heartbeat_ttl_s=self.ttl_s,
            store=self.store,
            cgroups=self.cgroups,
            unit_log_cap=self.unit_log_cap,
            local_dir=self.local_dir or DEFAULT_LOCAL_DIR,
            redis_retry_max_s=self.redis_retry_max_s,
            spool_disk_mb=self.spool_mb,
            command_log_cap=self.command_log_cap,
            redis_wait_s=self.redis_wait_s,
            redis_timeout_s=self.redis_timeout_s,
            engine=engine,
            scratch_dir=self.scratch_dir,
        )


#: The flags of `WorkerFlags` fields whose names are not the flag's.
_FLAG_NAMES = {
    "queues": "queue",
    "images": "image",
    "worker_id": "id",
    "memory_gb": "worker_memory_gb",
}


def worker_argv(flags: WorkerFlags, python: str = sys.executable) -> list[str]:
    """The command line of a worker container as a child process of ``python``:
    ``python -m simrun.cli worker`` (``simrun worker``) and the arguments of ``flags``."""
    return [python, "-m", "simrun.cli", "worker", *flags.to_argv()]
