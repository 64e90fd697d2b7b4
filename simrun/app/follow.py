"""Following a run until it ends (`follow`): read each time it may have changed (a push of
the embedded controller or the service's event stream, `RemoteWatch`; else polling)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from simrun.client import Client, ClientError, StreamBroken
from simrun.core.states import ACTIVE_TASK_STATES
from simrun.core.views import FailureView, RunSummary, RunView


class ProgressView(Protocol):
    """What follows a run: `update` with each new view, `close` at the end."""

    def update(self, run: RunView) -> None: ...

    def close(self) -> None: ...


def stuck_reason(run: RunView) -> str | None:
    """Why a running run cannot go on by itself, or None: every task with units on the
    way is blocked (no worker can fit them) and none of its units is queued or running."""
    if run.state != "running":
        return None
    active = [t for t in run.tasks if t.state in ACTIVE_TASK_STATES]
    if not active or any(
        t.state != "blocked" or t.count("running") or t.count("queued") for t in active
    ):
        return None
    return "; ".join(f"task {t.name!r} is blocked: {t.status or 'no worker fits'}" for t in active)


#: How long a run must stay stuck before embedded mode gives up on it.
STUCK_AFTER_S = 3.0


class Reader(Protocol):
    """Where a run's view comes from: a service (`RemoteReader`) or a store on this
    machine (`simrun.local.reads.StoreReader`)."""

    async def run(self, run_id: str) -> RunView | None: ...

    async def failures(self, run_id: str) -> list[FailureView]: ...

    async def runs(self, limit: int = 50) -> list[RunSummary]: ...


@dataclass(frozen=True)
class FollowEnd:
    """How following a run stopped: it ``ended``, was ``interrupted`` (Ctrl-C), is
    ``stuck`` (``detail`` says why) or the embedded session had a ``problem``."""

    run: RunView
    reason: Literal["ended", "interrupted", "stuck", "problem"]
    detail: str = ""


async def _until_either(first: Awaitable[None], event: asyncio.Event) -> None:
    """Wait for ``first`` or ``event``, whichever comes first; cancel the other."""
    if event.is_set():
        return
    waits = [asyncio.ensure_future(first), asyncio.ensure_future(event.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def follow(
    fetch: Callable[[], Awaitable[RunView]],
    view: ProgressView,
    *,
    poll_s: float = 0.25,
    changed: Callable[[float], Awaitable[None]] | None = None,
    interrupted: asyncio.Event | None = None,
    problem: Callable[[], str | None] | None = None,
    stuck_after_s: float | None = None,
) -> FollowEnd:
    """Show the run ``fetch`` returns until a `FollowEnd`; between two reads, await
    ``changed(poll_s)`` (a push, or ``poll_s`` at most)."""
    stuck_since: float | None = None
    interrupted = interrupted or asyncio.Event()
    pause = changed or asyncio.sleep
    try:
        while True:
            run = await fetch()
            view.update(run)
            if run.state != "running":
                return FollowEnd(run, "ended")
            if interrupted.is_set():
                return FollowEnd(run, "interrupted")
            if problem is not None and (detail := problem()) is not None:
                return FollowEnd(run, "problem", detail)
            if stuck_after_s is not None:
                reason = stuck_reason(run)
                if reason is None:
                    stuck_since = None
                elif stuck_since is None:
                    stuck_since = time.monotonic()
                elif time.monotonic() - stuck_since >= stuck_after_s:
                    return FollowEnd(run, "stuck", reason)
            await _until_either(pause(poll_s), interrupted)
    finally:
        view.close()


class RemoteReader:
    """Runs as a service answers over HTTP (the blocking client, in a thread)."""

    def __init__(self, client: Client, poll_s: float = 1.0) -> None:
        self.client, self.poll_s = client, poll_s

    async def run(self, run_id: str) -> RunView | None:
        return await self.view(run_id)

    async def view(self, run_id: str) -> RunView:
        return await asyncio.to_thread(self.client.run, run_id)

    async def follow(self, run_id: str, view: ProgressView) -> FollowEnd:
        """`follow` the run by the service's event stream."""
        return await watch_remote(self.client, run_id, view, poll_s=self.poll_s)

    async def cancel(self, run_id: str) -> int:
        return await asyncio.to_thread(self.client.cancel, run_id)

    async def failures(self, run_id: str) -> list[FailureView]:
        return await asyncio.to_thread(self.client.failures, run_id)

    async def runs(self, limit: int = 50) -> list[RunSummary]:
        return await asyncio.to_thread(self.client.runs, limit)


#: Seconds the first read waits for the stream's first view before asking once by GET.
FIRST_VIEW_WAIT_S = 5.0
#: Pauses before connecting the event stream again after it broke: first, at most.
RECONNECT_S = (0.25, 5.0)


class RemoteWatch:
    """A run of a service followed by its event stream (`fetch`, `changed`); polling while
    it reconnects (`RECONNECT_S`), told once to ``note``."""

    def __init__(
        self,
        client: Client,
        run_id: str,
        *,
        poll_s: float = 1.0,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.client, self.run_id, self.poll_s = client, run_id, poll_s
        self.note = note or (lambda _: None)
        self.polls = 0
        self.pushed = 0
        self.streaming = False
        self._fresh: RunView | None = None
        self._latest: RunView | None = None
        self._error: ClientError | None = None
        self._new = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._broke_noted = False

    async def _run_pump(self) -> None:
        pause = RECONNECT_S[0]
        while True:
            try:
                async for view in self.client.events(self.run_id):
                    self.streaming, pause = True, RECONNECT_S[0]
                    self._fresh = self._latest = view
                    self.pushed += 1
                    self._new.set()
                    if view.state != "running":
                        return
                reason = "the service ended it"
            except StreamBroken as exc:
                reason = str(exc)
            except ClientError as exc:
                self._error = exc
                return
            finally:
                self.streaming = False
                self._new.set()  # the follower reads now (polling, or the error)
            if not self._broke_noted:
                self._broke_noted = True
                self.note(f"note: the event stream stopped ({reason}); asking until it is back")
            await asyncio.sleep(pause)
            pause = min(pause * 2, RECONNECT_S[1])

    def _start(self) -> bool:
        if self._pump is not None:
            return False
        self._pump = asyncio.ensure_future(self._run_pump())
        return True

    async def fetch(self) -> RunView:
        """The run's latest view: the last the stream pushed, else one asked for by GET."""
        if self._start():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), FIRST_VIEW_WAIT_S)
        if self._error is not None:
            raise self._error
        fresh, self._fresh = self._fresh, None
        if fresh is not None:
            return fresh
        if self.streaming and self._latest is not None:
            return self._latest
        self.polls += 1
        view = await asyncio.to_thread(self.client.run, self.run_id)
        self._latest = view
        return view

    async def changed(self, timeout_s: float) -> None:
        """Return when the stream pushed a view (or stopped), or after ``timeout_s``
        (``poll_s`` at most while there is no stream)."""
        if self._fresh is not None or self._error is not None:
            return
        if not self.streaming:
            timeout_s = min(timeout_s, self.poll_s)
        self._new.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._new.wait(), timeout_s)

    async def close(self) -> None:
        """Stop following (the stream is closed)."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientError):
                await self._pump


async def watch_remote(
    client: Client,
    run_id: str,
    view: ProgressView,
    *,
    poll_s: float = 1.0,
    note: Callable[[str], None] | None = None,
) -> FollowEnd:
    """`follow` a run of the service ``client`` talks to, by its event stream."""
    watch = RemoteWatch(client, run_id, poll_s=poll_s, note=note)
    try:
        return await follow(watch.fetch, view, poll_s=poll_s, changed=watch.changed)
    finally:
        await watch.close()
