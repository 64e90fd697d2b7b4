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


async def run_events(
    controller: Controller,
    run_id: str,
    *,
    disconnected: Request | None = None,
    keepalive_s: float = KEEPALIVE_S,
    min_gap_s: float = MIN_GAP_S,
) -> AsyncIterator[bytes]:
    """The events of ``run_id``; ends after the run ended, when the changes are closed, or
    once the client of ``disconnected`` went away."""
    changes = controller.changes
    sent: str | None = None
    quiet_since = time.monotonic()
    while True:
        version = changes.version(run_id)  # before the read: nothing after it is missed
        view = await controller.queries.run(run_id)
        if view is None:
            return
        text = json.dumps(view.to_dict(), separators=(",", ":"))
        if text != sent:
            yield event("run", text)
            sent, quiet_since = text, time.monotonic()
        if view.state != "running" or changes.closed:
            return
        if disconnected is not None and await disconnected.is_disconnected():
            return
        left = keepalive_s - (time.monotonic() - quiet_since)
        if left <= 0:
            yield b": keep-alive\n\n"
            quiet_since, left = time.monotonic(), keepalive_s
        if await changes.wait(run_id, version, left) > version and min_gap_s > 0:
            await asyncio.sleep(min_gap_s)  # a burst of steps is read once


@router.get("/runs/{run_id}/events", dependencies=ONE_RUN, response_model=None)
async def events(run_id: str, request: Request, controller: ControllerDep) -> StreamingResponse:
    """The run's view as server-sent events while it runs."""
    return streaming(run_events(controller, run_id, disconnected=request))


def streaming(events: AsyncIterator[bytes]) -> StreamingResponse:
    """The answer of a route of server-sent events, never cached nor buffered."""
    return StreamingResponse(
        events,
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def polled_events(
    controller: Controller,
    read: Callable[[], Awaitable[tuple[str, Any]]],
    poll_s: float,
    disconnected: Request | None = None,
) -> AsyncIterator[bytes]:
    """The events ``read`` gives (its name and data): at once, then each time the data
    changed, read every ``poll_s`` and on the controller's changes; a keep-alive comment
    after `KEEPALIVE_S` without one. Ends when the service stops or the client left."""
    changes = controller.changes
    sent: str | None = None
    quiet_since = time.monotonic()
    while not changes.closed:
        version = changes.version("")  # grows with every step that changed something
        name, data = await read()
        text = json.dumps(data, separators=(",", ":"))
        if text != sent:
            yield event(name, text)
            sent, quiet_since = text, time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield b": keep-alive\n\n"
            quiet_since = time.monotonic()
        if disconnected is not None and await disconnected.is_disconnected():
            return
        if await changes.wait("", version, poll_s) > version:
            await asyncio.sleep(POLL_MIN_GAP_S)  # a burst of steps is read once
