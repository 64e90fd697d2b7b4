"""Running the service: the controller loop and the HTTP API in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import uvicorn

from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.errors import SimrunError
from simrun.plugins import TaskType
from simrun.service.controller import Controller
from simrun.service.dbvolume import db_volume_problem
from simrun.service.routes import create_app
from simrun.service.settings import ControllerSettings


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
    `RedisUnusable` ends both and is raised."""
    controller = await Controller.open(settings, types)
    stop = asyncio.Event()
    loop_task = asyncio.create_task(controller.run_forever(stop), name="simrun-controller")
    app = create_app(controller, token, default_shape=default_shape)
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off"))
    server.on_listening = on_listening

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
    log.info(
        "simrun service on http://%s:%d (store %s; heartbeats live %g s; worker containers "
        "of %d processes, %g GiB while none is live)",
        host,
        port,
        settings.store,
        settings.heartbeat_ttl_s,
        default_shape.processes,
        default_shape.memory_gb,
    )
    try:
        await server.serve()
    finally:
        stop.set()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(loop_task, timeout=10)
        finally:
            await controller.close()
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            log.info("simrun service stopped")
