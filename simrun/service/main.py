"""Running the service: the controller loop and the HTTP API in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import uvicorn

from simrun.plugins import TaskType
from simrun.service.app import create_app
from simrun.service.controller import Controller, ControllerSettings

__all__ = ["serve"]

log = logging.getLogger("simrun.service")


async def serve(
    settings: ControllerSettings,
    types: dict[str, TaskType],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    log_level: str = "info",
) -> None:
    """Open the controller, drive its loop and answer HTTP until SIGINT/SIGTERM."""
    controller = await Controller.open(settings, types)
    stop = asyncio.Event()
    loop_task = asyncio.create_task(controller.run_forever(stop), name="simrun-controller")
    app = create_app(controller, token)
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off")
    )
    log.info("simrun service on http://%s:%d (store %s)", host, port, settings.store)
    try:
        await server.serve()
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(loop_task, timeout=10)
        await controller.close()
