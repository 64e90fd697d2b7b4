"""``GET /runs/{id}/events`` over a real controller (real Redis, real SQLite) and a real
HTTP server (uvicorn in this process: a stream needs one), read by the command line's
client (`Client.events`, `RemoteWatch`). No worker runs: the run changes by commands."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
import uvicorn

from simrun.app.follow import RemoteWatch
from simrun.client import Client, ClientError, StreamBroken
from simrun.core.views import ErrorCode, RunView
from simrun.local.machine import free_socket
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support.service_harness import submit, work_doc
from tests.support.wait import still_running, until

pytestmark = pytest.mark.redis

TOKEN = "s3cret-token"


@contextlib.asynccontextmanager
async def serving(controller: Controller) -> AsyncIterator[str]:
    """The app over ``controller`` (with `TOKEN`) on a free port. Yields its URL."""
    app = create_app(controller, TOKEN)
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    await until(lambda: server.started, timeout_s=60, what="uvicorn", check=still_running(task))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        controller.changes.close()
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


async def _collect(client: Client, run_id: str, views: list[RunView]) -> None:
    async for view in client.events(run_id):  # as they come: the test reads them meanwhile
        views.append(view)  # noqa: PERF401


async def _until(what: Callable[[], object], timeout_s: float = 10) -> None:
    await until(what, timeout_s=timeout_s, what="the views", poll_s=0.02)


async def test_the_stream_sends_the_run_then_its_change_and_ends_with_it(
    controller: Controller,
) -> None:
    """The stream sends the run's view at once, a new view when the run changes (here: a
    cancel, notified by the controller), and ends after the view of the ended run."""
    run_id = await submit(controller, work_doc(units=3))
    async with serving(controller) as url:
        with Client(url, TOKEN) as client:
            views: list[RunView] = []
            reading = asyncio.ensure_future(_collect(client, run_id, views))
            await _until(lambda: len(views) == 1)
            assert views[0].state == "running"
            assert not reading.done()
            await controller.cancel(run_id)
            await asyncio.wait_for(reading, 10)  # the stream ended by itself
    assert [v.state for v in views] == ["running", "cancelled"]


async def test_the_stream_is_behind_the_token_and_knows_its_runs(controller: Controller) -> None:
    """Like every route but /health, the stream needs the token (the guard answers 401
    before it starts); an unknown run is refused with its code, not a broken stream."""
    run_id = await submit(controller, work_doc(units=1))
    async with serving(controller) as url:
        with Client(url, "wrong") as client, pytest.raises(ClientError, match="401") as denied:
            await anext(client.events(run_id))
        assert denied.value.code is ErrorCode.UNAUTHORIZED
        with Client(url, TOKEN) as client:
            with pytest.raises(ClientError, match="there is no run") as refused:
                await anext(client.events("20200101-000000-abcdef"))
            assert refused.value.code is ErrorCode.UNKNOWN_RUN
            assert not isinstance(refused.value, StreamBroken)


async def test_the_stream_ends_when_the_service_stops(controller: Controller) -> None:
    """Closing the changes (the service stops) ends an open stream, so that the HTTP
    server can stop without waiting for its followers."""
    run_id = await submit(controller, work_doc(units=1))
    async with serving(controller) as url:
        with Client(url, TOKEN) as client:
            views: list[RunView] = []
            reading = asyncio.ensure_future(_collect(client, run_id, views))
            await _until(lambda: len(views) == 1)
            controller.changes.close()
            await asyncio.wait_for(reading, 10)
    assert [v.state for v in views] == ["running"]


async def test_remote_watch_follows_by_the_stream_without_asking(controller: Controller) -> None:
    """`RemoteWatch` (what `submit --wait` and `status --watch` follow with) takes its views
    from the stream: no ``GET /runs/{id}`` while the stream works, and no note."""
    run_id = await submit(controller, work_doc(units=2))
    notes: list[str] = []
    async with serving(controller) as url:
        with Client(url, TOKEN) as client:
            watch = RemoteWatch(client, run_id, poll_s=0.05, note=notes.append)
            try:
                assert (await watch.fetch()).state == "running"
                await controller.cancel(run_id)
                await asyncio.wait_for(watch.changed(10), 10)
                assert (await watch.fetch()).state == "cancelled"
            finally:
                await watch.close()
    assert (watch.pushed, watch.polls, notes) == (2, 0, [])
