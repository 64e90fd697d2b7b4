"""Server-sent events: ``GET /runs/{id}/events`` (a run's view, event ``run``, at once and
each time it changed, until it ended) and the streams of documents read on a timer and on
the controller's changes (`polled_events`: the runs list, the workers)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from simrun.service.controller import Controller
from simrun.service.routes.deps import ONE_RUN, ControllerDep

router = APIRouter()

#: Seconds without an event after which a keep-alive comment is sent.
KEEPALIVE_S = 15.0
#: Seconds after an event before the view is read again (at most ~1/MIN_GAP_S events/s).
MIN_GAP_S = 0.05
#: The media type of server-sent events.
EVENT_STREAM = "text/event-stream"

#: Seconds after a wake-up before a polled document is read again: a busy controller
#: notifies every step (at most ~1/POLL_MIN_GAP_S reads a second).
POLL_MIN_GAP_S = 0.25


def event(name: str, data: str) -> bytes:
    """One server-sent event (``data`` holds no newline: it is compact JSON)."""
    return f"event: {name}\ndata: {data}\n\n".encode()


def run_events(
    controller: Controller, run_id: str, disconnected: Request | None = None
) -> AsyncIterator[bytes]:
    """The events of ``run_id``; ends after the run ended, when the service stops, or once
    the client of ``disconnected`` went away."""

    async def read() -> tuple[str, Any, bool] | None:
        view = await controller.queries.run(run_id)
        return None if view is None else ("run", view.to_dict(), view.state == "running")

    return polled_events(controller, read, KEEPALIVE_S, disconnected, key=run_id, gap_s=MIN_GAP_S)


@router.get("/runs/{run_id}/events", dependencies=ONE_RUN, response_model=None)
async def events(run_id: str, request: Request, controller: ControllerDep) -> StreamingResponse:
    """The run's view as server-sent events while it runs."""
    return streaming(run_events(controller, run_id, request))


def streaming(events: AsyncIterator[bytes]) -> StreamingResponse:
    """The answer of a route of server-sent events, never cached nor buffered."""
    return StreamingResponse(
        events,
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def polled_events(
    controller: Controller,
    read: Callable[[], Awaitable[tuple[str, Any, bool] | None]],
    poll_s: float,
    disconnected: Request | None = None,
    *,
    key: str = "",
    gap_s: float = POLL_MIN_GAP_S,
) -> AsyncIterator[bytes]:
    """The events ``read`` gives (name, data, and whether more may come; None: nothing to
    send): at once, then each time the data changed, read every ``poll_s`` and on the
    controller's changes of ``key`` (any run: ""); a keep-alive comment after `KEEPALIVE_S`
    without one. Ends when the service stops or the client left."""
    changes = controller.changes
    sent: str | None = None
    quiet_since = time.monotonic()
    while True:
        version = changes.version(key)  # before the read: nothing after it is missed
        found = await read()
        if found is None:
            return
        name, data, more = found
        text = json.dumps(data, separators=(",", ":"))
        if text != sent:
            yield event(name, text)
            sent, quiet_since = text, time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield b": keep-alive\n\n"
            quiet_since = time.monotonic()
        if not more or changes.closed:
            return
        if disconnected is not None and await disconnected.is_disconnected():
            return
        if await changes.wait(key, version, poll_s) > version and gap_s > 0:
            await asyncio.sleep(gap_s)  # a burst of steps is read once
