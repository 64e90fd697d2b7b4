"""Embedded mode: `EmbeddedSession` holds, while ``simrun run`` runs, the store's lock, Redis
(``REDIS_URL``, else a private ``redis-server``), the service in this process and worker
containers as child processes, stops them in order, and logs to ``STORE/logs/``."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import logging.handlers
import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import uvicorn
from redis.exceptions import RedisError

from simrun.app.follow import STUCK_AFTER_S, FollowEnd, ProgressView, follow
from simrun.config import ENV_JOB_KEY, ENV_JOB_KEY_FILE, redact_url
from simrun.core.layout import StoreLayout
from simrun.core.views import FailureView, RunView
from simrun.local import lock as store_lock
from simrun.local.guard import DONE, REMOVE
from simrun.local.machine import LocalError, free_socket, gpu_shares, last_line
from simrun.local.reads import StoreReader
from simrun.local.redis import PrivateRedis, find_redis_server
from simrun.local.settings import LocalOptions
from simrun.plugins import TaskType
from simrun.queues.connect import RedisUnusable
from simrun.queues.keys import DEFAULT_PREFIX
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from simrun.service.settings import ControllerSettings
from simrun.worker.engine import EngineError, find_engine, worker_argv_in_image
from simrun.worker.settings import WorkerSettings, worker_argv

#: Bytes past which a log of the session is rotated, and how many rotated ones are kept.
LOG_MAX_BYTES = 64 * 2**20
LOG_BACKUPS = 3


def rotate_log(path: Path, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> None:
    """Before appending to ``path``: when it holds ``max_bytes`` or more, it becomes
    ``path.1`` (``path.1`` becomes ``path.2``, and so on; the one past ``backups`` goes)."""
    try:
        if path.stat().st_size < max_bytes:
            return
    except FileNotFoundError:
        return
    for n in range(backups - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{n + 1}"))
    os.replace(path, path.with_name(f"{path.name}.1"))


def _session_line() -> bytes:
    """The line a session writes into each log it appends to, where its part begins."""
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"--- simrun session (pid {os.getpid()}) started at {when} ---\n".encode()


log = logging.getLogger(__name__)

#: Seconds between two looks at the private redis-server (started again if it exited).
REDIS_WATCH_S = 0.5

#: How long `EmbeddedSession.drain` waits for the controller to ingest the stopped workers'
#: last reports, and how often it looks.
DRAIN_TIMEOUT_S = 10.0
DRAIN_POLL_S = 0.05


def redis_prefix(store: Path, private: bool) -> str:
    """The key prefix of a session: the default on a private server, else one per store
    (a shared server may hold the queues of other stores and installations)."""
    if private:
        return DEFAULT_PREFIX
    digest = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:10]
    return f"simrun-local-{digest}"


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the session decides what Ctrl-C does."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass
class _Worker:
    number: int
    proc: subprocess.Popen[bytes]
    log: Path


class EmbeddedSession:
    """Redis, the service and the workers of one ``simrun run``. Stopping: the workers get
    SIGTERM (running units get their grace period, then are handed back), the controller
    applies their last reports, then the HTTP API, the controller and Redis stop; a run
    that did not end stays in the store, to go on with."""

    def __init__(self, options: LocalOptions, types: Mapping[str, TaskType]) -> None:
        self.options = options
        self.types = dict(types)
        self.store = options.store.resolve()
        self.logs = StoreLayout(self.store).logs
        self.redis_note = ""
        self.url = ""
        #: The interrupted runs of the store this session leaves alone (`LocalOptions.
        #: hold_interrupted`), the latest first.
        self.held: tuple[str, ...] = ()
        self._controller: Controller | None = None
        self._redis: PrivateRedis | None = None
        self._lock: IO[str] | None = None
        self._log_handler: logging.Handler | None = None
        self._root_level = logging.WARNING
        self._stop_loop = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._server: _EmbeddedServer | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._workers: list[_Worker] = []
        self._guard: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._redis_watch: asyncio.Task[None] | None = None
        self._redis_problem: str | None = None

    @property
    def controller(self) -> Controller:
        if self._controller is None:
            raise RuntimeError("the session is not started")
        return self._controller

    def reader(self) -> StoreReader:
        """A reader of the session's runs through its controller (ETAs count the live
        worker processes); outputs are shown under the store as the options name it."""
        controller = self.controller
        return StoreReader(controller.store, controller.resources, self.options.store, controller)

    async def view(self, run_id: str) -> RunView:
        """Run ``run_id`` as `reader` shows it (`LocalError` when there is none)."""
        view = await self.reader().run(run_id)
        if view is None:
            raise LocalError(f"there is no run {run_id!r} in {self.store}")
        return view

    async def failures(self, run_id: str) -> list[FailureView]:
        return await self.reader().failures(run_id)

    async def cancel(self, run_id: str) -> int:
        return await self.controller.cancel(run_id)

    async def follow(
        self,
        run_id: str,
        view: ProgressView,
        *,
        interrupted: asyncio.Event | None = None,
        poll_s: float = 0.25,
        gap_s: float = 0.0,
    ) -> FollowEnd:
        """`simrun.app.follow.follow` run ``run_id``, read again on each change the
        controller notifies (``gap_s`` after it: a burst of steps is read once)."""
        reader = self.reader()
        version = 0

        async def fetch() -> RunView:
            nonlocal version
            version = reader.version(run_id)  # before the read: no change is missed
            return await self.view(run_id)

        async def changed(timeout_s: float) -> None:
            await reader.changed(run_id, version, timeout_s)
            await asyncio.sleep(gap_s)

        return await follow(
            fetch,
            view,
            poll_s=poll_s,
            changed=changed,
            interrupted=interrupted,
            problem=self.problem,
            stuck_after_s=STUCK_AFTER_S,
        )

    async def __aenter__(self) -> EmbeddedSession:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- starting ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Lock the store, then start Redis, the service and the workers."""
        if not self.options.redis_url:
            find_redis_server()  # before anything is written
        self._lock = store_lock.take(self.store)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._log_to_file()
        self._start_guard()
        opts = self.options
        if opts.redis_url:
            redis_url, private = opts.redis_url, False
            self.redis_note = f"REDIS_URL {redact_url(redis_url)}"
        else:
            self._redis = PrivateRedis()
            redis_url, private = await asyncio.to_thread(self._redis.start), True
            if self._redis.proc is not None:
                self._guard_line(str(self._redis.proc.pid))
            if self._redis.directory is not None:
                self._guard_line(f"{REMOVE}{self._redis.directory}")
            address = redis_url.removeprefix("redis://").removesuffix("/0")
            self.redis_note = f"private redis-server on {address} (thrown away at the end)"
        prefix = redis_prefix(self.store, private)
        settings = ControllerSettings(
            self.store, redis_url, prefix, limits=opts.limits, intake=opts.intake, probe=opts.probe
        )
        try:
            self._controller = await Controller.open(settings, self.types)
            # A local run does not wait for a Redis that is not there (a deployment does).
            await self._controller.queue.pool.ping()
        except (OSError, RedisError, RedisUnusable) as exc:
            if self._controller is not None:
                await self._controller.close()
                self._controller = None
            where = "REDIS_URL " if opts.redis_url else ""
            raise LocalError(
                f"cannot reach Redis at {where}{redact_url(redis_url)}: {exc}"
            ) from exc
        if private:
            await self._redispatch_earlier_jobs()
        if opts.hold_interrupted:
            # before the loop starts: no unit of theirs is dispatched
            running = await self._controller.store.running_runs()
            self.held = tuple(r.id for r in running if r.id != opts.go_on_with)
            self._controller.store.held = frozenset(self.held)
        # the runs this session drives go on: their pause (since their session stopped) ends
        store, now_s = self._controller.store, self._controller.clock.now()
        await store.resume_runs([r.id for r in await store.running_runs()], now_s)
        self._loop_task = asyncio.create_task(
            self._controller.run_forever(self._stop_loop), name="simrun-controller"
        )
        if self._redis is not None:
            self._redis_watch = asyncio.create_task(self._watch_redis(), name="simrun-redis")
        await self._start_http()
        self._start_workers(redis_url, prefix)

    async def _redispatch_earlier_jobs(self) -> None:
        """The jobs an interrupted session left in flight went with its private Redis: their
        units go back to pending (said at INFO: expected, not lost)."""
        store = self.controller.store
        left = await store.jobs()
        if not left:
            return
        units = await store.release_jobs(
            [j.id for j in left], "its session stopped before it did: dispatched again"
        )
        log.info(
            "%d jobs (%d units) in flight when an earlier session on this store stopped "
            "are dispatched again (its private Redis went with it)",
            len(left),
            units,
        )

    def _start_guard(self) -> None:
        """`simrun.local.guard` ends Redis and the workers should this process die."""
        self._guard = subprocess.Popen(
            [sys.executable, "-m", "simrun.local.guard"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _guard_line(self, line: str) -> None:
        if self._guard is not None and self._guard.stdin is not None:
            with contextlib.suppress(OSError):
                self._guard.stdin.write(f"{line}\n".encode())
                self._guard.stdin.flush()

    async def _stop_guard(self) -> None:
        guard, self._guard = self._guard, None
        if guard is None or guard.stdin is None:
            return
        with contextlib.suppress(OSError):
            guard.stdin.write(f"{DONE}\n".encode())
            guard.stdin.close()
        try:
            await asyncio.to_thread(guard.wait, 10)
        except subprocess.TimeoutExpired:
            guard.kill()
            await asyncio.to_thread(guard.wait)

    def _log_to_file(self) -> None:
        path = self.logs / "service.log"
        with path.open("ab") as out:
            out.write(_session_line())
        handler = logging.handlers.RotatingFileHandler(
            path, mode="a", maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        self._root_level = root.level
        root.setLevel(logging.INFO)
        root.addHandler(handler)
        for name in ("arq", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self._log_handler = handler

    async def _start_http(self) -> None:
        sock = free_socket()
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.controller, self.options.token),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        self._server = _EmbeddedServer(config)
        self._http_task = asyncio.create_task(self._server.serve(sockets=[sock]))
        deadline = time.monotonic() + 10
        while not self._server.started:
            if self._http_task.done():
                self._http_task.result()
                raise LocalError("the HTTP API of the embedded service stopped at once")
            if time.monotonic() > deadline:
                raise LocalError("the HTTP API of the embedded service did not start in 10 s")
            await asyncio.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}"

    def _worker_flags(self, number: int, redis_url: str, prefix: str) -> WorkerSettings:
        opts = self.options
        host_images = tuple(i for i in opts.images if i not in opts.unit_images)
        return WorkerSettings(
            queues=("cpu", "gpu"),
            images=host_images,
            engine=opts.engine if host_images else None,
            redis_url=redis_url,
            prefix=prefix,
            memory_gb=opts.memory_gb,
            processes=opts.processes,
            gpus=len(self._gpu_share(number)),
            worker_id=f"local-{os.getpid()}-{number}",
            grace_s=opts.grace_s,
            plugins=opts.plugins,
            python_path=opts.python_path,
            store=self.store,
            # beside its log: nothing of the session is left in the machine's temporary
            # directory, even when simrun is killed during an outage of its Redis
            local_dir=self.logs / "worker-local",
            scratch_dir=opts.scratch_dir,
        )

    def _worker_env(self, env: dict[str, str], number: int) -> dict[str, str]:
        """The environment of worker ``number``: with GPUs on the machine, only its share
        of them visible (``CUDA_VISIBLE_DEVICES``), so two workers never use one device."""
        if not self.options.gpu_ids:
            return env
        return {**env, "CUDA_VISIBLE_DEVICES": ",".join(self._gpu_share(number))}

    def _gpu_share(self, number: int) -> tuple[str, ...]:
        """The GPUs of worker ``number`` (none for a worker of an image, past the others)."""
        shares = gpu_shares(self.options.gpu_ids, self.options.workers)
        return shares[number - 1] if number <= len(shares) else ()

    def _start_workers(self, redis_url: str, prefix: str) -> None:
        # the session's service signs with the store's key: so do its workers, whatever the
        # environment says
        given = {**os.environ, **self.options.env}
        env = {k: v for k, v in given.items() if k not in (ENV_JOB_KEY, ENV_JOB_KEY_FILE)}
        env["PYTHONUNBUFFERED"] = "1"
        for number in range(1, self.options.workers + 1):
            argv = worker_argv(self._worker_flags(number, redis_url, prefix))
            self._spawn(number, argv, self._worker_env(env, number))
        for k, image in enumerate(self.options.unit_images, start=self.options.workers + 1):
            self._start_image_worker(k, image, redis_url, prefix, env)

    def _spawn(self, number: int, argv: list[str], env: dict[str, str], note: str = "") -> None:
        """Start worker container ``number``, its output appended to its log, in a session
        of its own (a Ctrl-C at the terminal reaches this process only)."""
        path = self.logs / f"worker-{number}.log"
        rotate_log(path)
        with path.open("ab") as out:
            out.write(_session_line() + note.encode())
            out.flush()
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self._guard_line(str(proc.pid))
        self._workers.append(_Worker(number, proc, path))

    def _start_image_worker(
        self, number: int, image: str, redis_url: str, prefix: str, env: dict[str, str]
    ) -> None:
        """Worker container ``number``: ``simrun worker --image IMAGE`` inside that image,
        through the engine, the store and the plugins' directories mounted at their own
        paths, the same size as the others."""
        opts = self.options
        assert opts.engine is not None  # `image_problem` refused unit images without one
        assert opts.memory_gb is not None  # `ready_session` gave the pool's
        flags = self._worker_flags(number, redis_url, prefix)
        flags = replace(flags, queues=(), images=(image,), engine=None, gpus=0)
        argv = worker_argv_in_image(
            opts.engine,
            image,
            flags.to_argv(),
            name=f"simrun-local-{os.getpid()}-{number}",
            memory_gb=opts.memory_gb,
            workdir=Path.cwd(),
            mounts=[self.store, Path.cwd(), *(Path(p).resolve() for p in opts.python_path)],
            environ={"PYTHONUNBUFFERED": "1"},
        )
        self._spawn(number, argv, env, f"image {image} through {opts.engine}\n")

    # -- while running -------------------------------------------------------------------

    async def _watch_redis(self, every_s: float = REDIS_WATCH_S) -> None:
        """Start the private redis-server again (same port, empty) when it exits: the
        service and the workers ride out the outage and the run goes on from SQLite. When
        it cannot start, `problem` says so."""
        server = self._redis
        while server is not None and not self._stopping:
            await asyncio.sleep(every_s)
            if self._stopping or server.alive() or server.proc is None:
                continue
            code = server.proc.returncode
            logged = server.directory / "redis.log" if server.directory else None
            last = last_line(logged) if logged is not None else ""
            log.warning(
                "the private redis-server exited (code %s: %s); starting it again on port %s "
                "(empty: the run goes on from the store)",
                code,
                last,
                server.port,
            )
            try:
                await asyncio.to_thread(server.start)
            except LocalError as exc:
                self._redis_problem = (
                    f"the private redis-server exited (code {code}) and could not be "
                    f"started again: {exc}"
                )
                log.error("%s", self._redis_problem)
                continue
            self._redis_problem = None
            if server.proc is not None:
                self._guard_line(str(server.proc.pid))

    def problem(self) -> str | None:
        """What went wrong with the session's own processes, or None: a worker container
        that ended by itself, the controller loop that died, the HTTP API that stopped."""
        if self._stopping:
            return None
        if self._redis_problem is not None:
            return self._redis_problem
        for w in self._workers:
            code = w.proc.poll()
            if code is not None:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                return (
                    f"worker container {w.number} {how}; the last line of its log "
                    f"({w.log}): {last_line(w.log)}"
                )
        for name, task in (("controller", self._loop_task), ("HTTP API", self._http_task)):
            if task is not None and task.done():
                error = task.exception() if not task.cancelled() else None
                return f"the embedded {name} stopped: {error or 'cancelled'}"
        return None

    def hurry(self) -> None:
        """End the workers' grace period now (a second Ctrl-C): running units are handed
        back at once."""
        for w in self._workers:
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.send_signal(signal.SIGTERM)

    # -- stopping ------------------------------------------------------------------------------

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Stop the workers and let the controller apply their last reports (until the
        report stream is empty, at most ``timeout_s``); the service stays up (to be read)
        until `stop`."""
        self._stopping = True
        had_workers = bool(self._workers)
        await self._stop_workers()
        if had_workers:
            await self._wait_reports_ingested(timeout_s)

    async def _wait_reports_ingested(self, timeout_s: float) -> None:
        """Wait until the controller loop has ingested every report in the stream (the
        report lag is 0), the loop ended, or ``timeout_s`` passed."""
        controller = self._controller
        deadline = time.monotonic() + timeout_s
        while controller is not None and self._loop_task is not None:
            if self._loop_task.done():
                return
            try:
                lag = await controller.queries.report_lag()
            except (RedisError, OSError) as exc:
                log.warning("cannot read the report lag while draining: %s", exc)
                return
            if lag.entries == 0:
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "%d reports not ingested within %g s of draining", lag.entries, timeout_s
                )
                return
            await asyncio.sleep(DRAIN_POLL_S)

    async def stop(self) -> None:
        """`drain`, then stop the service and Redis and release the store. Safe to call
        more than once."""
        await self.drain()
        self._stop_loop.set()
        if self._loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._loop_task, timeout=15)
            self._loop_task = None
        if self._server is not None and self._http_task is not None:
            if self._controller is not None:
                self._controller.changes.close()  # event streams end: the server can stop
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._http_task, timeout=10)
            self._http_task = None
        if self._controller is not None:
            # The runs it drove and did not end are stopped from now: a pause, not run time.
            store = self._controller.store
            await store.stop_runs(
                [r.id for r in await store.running_runs()], self._controller.clock.now()
            )
            # A run that ended just before the stop: its attempts hashes go now, not
            # left in a shared Redis (those of jobs still queued stay; the next
            # session on this store deletes them once the jobs are gone).
            with contextlib.suppress(RedisError, OSError):
                await self._controller.forget_ended()
            await self._controller.close()
            self._controller = None
        if self._redis_watch is not None:
            self._redis_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._redis_watch
            self._redis_watch = None
        if self._redis is not None:
            await asyncio.to_thread(self._redis.stop)
            self._redis = None
        await self._stop_guard()
        if self._log_handler is not None:
            root = logging.getLogger()
            root.removeHandler(self._log_handler)
            root.setLevel(self._root_level)
            self._log_handler.close()
            self._log_handler = None
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    async def _stop_workers(self) -> None:
        alive = [w for w in self._workers if w.proc.poll() is None]
        for w in alive:
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.options.grace_s + 15
        for w in alive:
            try:
                await asyncio.to_thread(w.proc.wait, max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker container %d did not stop: killed", w.number)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGKILL)
                await asyncio.to_thread(w.proc.wait)
        self._workers = []


def images_of(types: Sequence[TaskType], run_image: str | None = None) -> tuple[str, ...]:
    """The task images of ``types`` and the run's environment image ``run_image`` (their
    queues are served by the embedded workers)."""
    found = {t.image for t in types if t.image}
    if run_image:
        found.add(run_image)
    return tuple(sorted(found))


def local_engine(named: str | None) -> str | None:
    """The container engine of an embedded session: ``named`` (``--engine`` /
    ``SIMRUN_ENGINE``; `LocalError` when it is not found), else docker or podman on ``PATH``
    (None: none)."""
    try:
        return find_engine(named)
    except EngineError as exc:
        raise LocalError(str(exc)) from None


def image_problem(
    tasks: Sequence[tuple[str, TaskType]], engine: str | None, run_image: str | None = None
) -> str | None:
    """Why an embedded session cannot run the (task name, type) pairs of a workflow in
    their images (the type's, else ``run_image``): one needs the container ``engine``."""
    for name, task_type in tasks:
        image = task_type.image if task_type.image is not None else run_image
        if image is not None and engine is None:
            return (
                f"task {name!r} runs in image {image!r} and no container engine was found "
                "(docker or podman on PATH, or --engine / SIMRUN_ENGINE)"
            )
    return None


def unit_images(
    tasks: Sequence[tuple[str, TaskType]], run_image: str | None = None
) -> tuple[str, ...]:
    """The images the units of splittable types of ``tasks`` run in (the type's image,
    else ``run_image``): each gets a worker container of its own inside the image."""
    found = {
        task_type.image if task_type.image is not None else run_image
        for _, task_type in tasks
        if task_type.command is None
    }
    return tuple(sorted(i for i in found if i is not None))
