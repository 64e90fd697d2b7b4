"""Running the service: the controller loop and the HTTP API in one event loop, alone on
its store (the store's lock, `simrun.db.hold`) and on its Redis namespace (`RedisClaim`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import uvicorn
from redis.asyncio import Redis
from redis.exceptions import RedisError

from simrun import db
from simrun.config import redact_url
from simrun.core.layout import StoreLayout
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.errors import SimrunError
from simrun.plugins import TaskType
from simrun.queues.connect import RedisUnusable
from simrun.queues.keys import Keys
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from simrun.service.settings import ControllerSettings
from simrun.service.volumes import db_volume_problem


class DatabaseVolumeError(SimrunError, ValueError):
    """The service's SQLite file cannot be used where it is; the message says why."""


def check_database(
    database: Path, *, on_network_fs: bool = False, mounts_file: Path = Path("/proc/mounts")
) -> None:
    """Refuse a SQLite file on a network file system unless ``on_network_fs``; make its
    directory."""
    problem = db_volume_problem(database, mounts_file)
    if problem is not None and not on_network_fs:
        raise DatabaseVolumeError(problem)
    if problem is not None:
        log.warning("going on (--db-on-network-fs): %s", problem)
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseVolumeError(
            f"cannot make the directory of the service's database {database}: {exc}"
        ) from None


log = logging.getLogger(__name__)


def lock_store(settings: ControllerSettings) -> IO[str]:
    """Take the lock of the store (`simrun.db.hold`, as `simrun run` does): the open lock
    file, whose closing releases it. `db.FileInUse` naming its holder when another service
    or `simrun run` drives the store. Blocking."""
    lock = StoreLayout(settings.store).lock
    try:
        return db.hold(lock, db.holder_line("`simrun service`"))
    except db.FileInUse as exc:
        raise db.FileInUse(
            f"the store {settings.store} is in use by another {db.shown_holder(exc.holder)}: "
            "stop it first, or give this service another --store",
            exc.holder,
        ) from None


class NamespaceInUse(RedisUnusable):
    """Another live service holds the Redis namespace (URL and key prefix) of this one."""


#: Takes the claim when it is free, ours, or the one ARGV[3] (a holder known gone); else
#: answers who holds it. KEYS[1]: the claim; ARGV: our identity, the expiry (ms), the holder
#: to take over ('' none).
_KEEP = """
local held = redis.call('GET', KEYS[1])
if (not held) or held == ARGV[1] or (ARGV[3] ~= '' and held == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return false
end
return held
"""
#: Deletes the claim when it is still ours.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _read_proc(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_space() -> dict[str, str]:
    """Where this process's pid means something: the host, the kernel's boot (one per
    machine and boot), the pid namespace (one per container)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return {
        "host": socket.gethostname(),
        "boot": _read_proc("/proc/sys/kernel/random/boot_id"),
        "pidns": namespace,
    }


def _identity(store: Path) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        **_pid_space(),
        "since": time.time(),
        "store": str(store),
        "token": uuid.uuid4().hex,  # this process's claim, not one of a pid reused later
    }


def _gone(holder: dict[str, Any]) -> bool:
    """Whether the process that holds a claim is known to be gone: its pid is one of this
    pid space (host, boot, pid namespace: not another container's), and it is ours (an
    earlier process's claim) or no process's."""
    pid = holder.get("pid")
    here = _pid_space()
    if any(holder.get(k) != v for k, v in here.items()) or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's live process
    return False


def _restarted_here(holder: dict[str, Any]) -> bool:
    """Whether a claim's holder ran on this host and boot in another pid namespace: this
    container's earlier life, whose pid says nothing here (blocking: reads /proc)."""
    here = _pid_space()
    return (
        holder.get("host") == here["host"]
        and holder.get("boot") == here["boot"]
        and holder.get("pidns") != here["pidns"]
    )


#: Seconds between two looks at a claim waited out (`RedisClaim.lapsed`).
LAPSE_POLL_S = 0.25


def _text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


def _read_holder(raw: bytes | str) -> dict[str, Any]:
    text = _text(raw)
    try:
        found = json.loads(text)
    except ValueError:
        return {"raw": text}
    return found if isinstance(found, dict) else {"raw": text}


def shown_holder(holder: dict[str, Any]) -> str:
    """A claim's holder as a message names it."""
    if "raw" in holder:
        return f"a process that wrote {holder['raw']!r}"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("since", 0))))
    return (
        f"`simrun service` (pid {holder.get('pid')} on {holder.get('host')} since {since}, "
        f"store {holder.get('store')})"
    )


@dataclass
class RedisClaim:
    """The claim of one service on its Redis namespace, so that two never dispatch from one
    queue: `Keys.service_lock` holds the holder's identity (pid, host, since, store), set
    with NX and an expiry of ``ttl_s``, refreshed by the controller's loop every third of
    it (`Controller.hold`) and deleted at a clean stop. An expired claim is free; one whose
    process is known gone (`_gone`: on this host) is taken over, one of this container
    before a restart once it lapses unrefreshed (`lapsed`)."""

    redis: Redis
    keys: Keys
    ttl_s: float
    store: Path
    where: str = ""
    identity: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.identity = self.identity or _identity(self.store)
        self._mine = json.dumps(self.identity, sort_keys=True)
        #: Whether this service took the claim (then it deletes it at its stop).
        self.held = False

    @property
    def every_s(self) -> float:
        return self.ttl_s / 3

    async def keep(self) -> None:
        """Take the claim or refresh it. `NamespaceInUse` when another live service holds
        it; `RedisError` while Redis does not answer."""
        ttl_ms = str(max(1, round(self.ttl_s * 1000)))
        raw = await self._eval(_KEEP, self._mine, ttl_ms, "")
        if raw is not None:
            holder = _read_holder(raw)
            if await asyncio.to_thread(_gone, holder) or await self.lapsed(raw, holder):
                raw = await self._eval(_KEEP, self._mine, ttl_ms, _text(raw))
                if raw is None:
                    log.warning(
                        "took over the Redis key prefix from %s, gone", shown_holder(holder)
                    )
        if raw is None:
            self.held = True
            return
        raise NamespaceInUse(
            f"another {shown_holder(_read_holder(raw))} drives the Redis key prefix "
            f"{self.keys.prefix!r} at {self.where}: stop it first, or give this service "
            f"another --prefix (a service killed without stopping frees it within "
            f"--lock-ttl-s, {self.ttl_s:g} s)"
        )

    async def lapsed(self, raw: bytes | str, holder: dict[str, Any]) -> bool:
        """Whether the claim ``raw`` of this container's earlier life (`_restarted_here`, as
        after a restart) lapses unrefreshed: watched until it expires (True) or is refreshed
        or changes hands (False: its holder is alive). Only at the first take."""
        if self.held or not await asyncio.to_thread(_restarted_here, holder):
            return False
        key = self.keys.service_lock
        left_ms = int(await self.redis.pttl(key))
        if left_ms < 0:
            return left_ms == -2  # gone meanwhile (-1: no expiry, it never lapses)
        log.info(
            "the Redis key prefix %r is claimed by %s, of this container before a restart: "
            "waiting up to %.0f s for it to lapse", self.keys.prefix, shown_holder(holder),
            left_ms / 1000,
        )  # fmt: skip
        while True:
            await asyncio.sleep(LAPSE_POLL_S)
            value, now_ms = await self.redis.get(key), int(await self.redis.pttl(key))
            if value is None:
                return True
            # Unrefreshed, the time left Redis tells only falls; a refresh since the last
            # look (its holder refreshes less often than we look) raises it.
            if _text(value) != _text(raw) or now_ms > left_ms:
                return False  # refreshed or taken: alive
            left_ms = now_ms

    async def release(self) -> None:
        """Delete the claim if it is still ours."""
        if not self.held:
            return
        self.held = False
        await self._eval(_RELEASE, self._mine)

    async def _eval(self, script: str, *args: str) -> Any:
        """``EVAL script`` on the claim's key (redis-py's asyncio client types the answer as
        maybe not awaitable: it is)."""
        return await cast(
            "Awaitable[Any]", self.redis.eval(script, 1, self.keys.service_lock, *args)
        )


async def _claim_early(claim: RedisClaim, timeout_s: float) -> None:
    """Take ``claim`` now when Redis answers (`NamespaceInUse` before the API listens; a
    claim of this container before a restart is waited out first, `RedisClaim.lapsed`);
    while it does not, the loop takes it once it does (`Controller.hold`)."""
    try:
        await asyncio.wait_for(claim.redis.ping(), timeout=timeout_s)
        await claim.keep()  # each call bounded by the client's socket timeout
    except (RedisError, OSError, TimeoutError) as exc:
        log.info("the claim on the Redis key prefix waits for Redis (%s)", exc)


async def _release(claim: RedisClaim) -> None:
    """Give up ``claim`` at a clean stop (it expires by itself when Redis is away)."""
    try:
        await asyncio.wait_for(claim.release(), timeout=5)
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("the claim on the Redis key prefix expires by itself: %s", exc)


#: The signals that stop the service (``docker compose stop`` sends SIGTERM).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handling (it would raise the signal again and end
    the process before the controller closed): `serve` handles them."""

    #: Called with the URL the server listens on once it does (the port it bound).
    on_listening: Callable[[str], None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_listening is not None:
            port = self.config.port
            if self.servers and self.servers[0].sockets:
                port = self.servers[0].sockets[0].getsockname()[1]
            self.on_listening(f"http://{self.config.host}:{port}")


async def serve(
    settings: ControllerSettings,
    types: dict[str, TaskType],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    log_level: str = "info",
    default_shape: ContainerShape = DEFAULT_SHAPE,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Drive the controller's loop and answer HTTP until SIGINT/SIGTERM, then close it;
    `RedisUnusable` ends both and is raised. The service holds its store's lock (else
    `db.FileInUse`) and its Redis namespace's claim (else `NamespaceInUse`, at start when
    Redis answers, or once it does)."""
    lock = await asyncio.to_thread(lock_store, settings)
    try:
        controller = await Controller.open(settings, types)
        try:
            claim = RedisClaim(
                controller.queue.redis, controller.queue.keys, settings.lock_ttl_s,
                settings.store, redact_url(settings.redis_url),
            )  # fmt: skip
            await _claim_early(claim, settings.redis_timeout_s)
            controller.hold(claim)
            app = create_app(controller, token, default_shape=default_shape)
            server = _Server(
                uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off")
            )
            server.on_listening = on_listening
            log.info(
                "simrun service on http://%s:%d (store %s; heartbeats live %g s; worker "
                "containers of %d processes, %g GiB while none is live)",
                host, port, settings.store, settings.heartbeat_ttl_s, default_shape.processes,
                default_shape.memory_gb,
            )  # fmt: skip
            try:
                await _run(controller, server)
            finally:
                await _release(claim)
        finally:
            await controller.close()
    finally:
        lock.close()


async def _run(controller: Controller, server: _Server) -> None:
    """The loop and the HTTP server until a signal, or until the loop ends early (its error
    is raised)."""
    stop = asyncio.Event()
    loop_task = asyncio.create_task(controller.run_forever(stop), name="simrun-controller")

    def on_signal() -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True
        controller.changes.close()  # the event streams end: uvicorn waits for open answers

    def on_loop_end(task: asyncio.Task[None]) -> None:
        # The loop ends early only for `RedisUnusable`: the HTTP side stops too.
        if not task.cancelled() and task.exception() is not None:
            server.should_exit = True
            controller.changes.close()

    loop_task.add_done_callback(on_loop_end)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    try:
        await server.serve()
    finally:
        stop.set()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(loop_task, timeout=10)
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            log.info("simrun service stopped")
