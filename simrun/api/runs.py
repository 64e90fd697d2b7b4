"""A submitted run as the Python API hands it out: `Run` (its view, `wait`, `cancel`) over a
service or an embedded session (`Backend`), and `RunResult`, the view `wait` returns."""

from __future__ import annotations

import dataclasses
import queue
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from simrun.api.bridge import Bridge
from simrun.api.display import make_display, timeout_text
from simrun.app.follow import FollowEnd, ProgressView, RemoteReader
from simrun.core.views import FailureView, RunView, TaskView
from simrun.errors import SimrunError
from simrun.local.machine import LocalError

if TYPE_CHECKING:
    from simrun.client import Client

#: Seconds between two looks of `Run.wait` at its display and its deadline.
TICK_S = 0.1
#: Seconds between two reads of a run when nothing says it changed.
POLL_S = 1.0


@dataclass(frozen=True)
class RunResult(RunView):
    """A run's view (`simrun.core.views.RunView`) with its failed units and their last
    errors."""

    failures: tuple[FailureView, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    def task(self, name: str) -> TaskView:
        """The view of task ``name`` (`KeyError` names the tasks there are)."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"run {self.id} has no task {name!r}; its tasks: {self.task_names()}")

    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def outputs(self) -> dict[str, Path]:
        """Each task's output directory, for the tasks whose view tells it (a run of
        `simrun.run_local`; a service's view does not: its store is elsewhere)."""
        return {t.name: Path(t.out) for t in self.tasks if t.out}


def result_of(view: RunView, failures: list[FailureView]) -> RunResult:
    fields = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
    return RunResult(**fields, failures=tuple(failures))


class RunTimeout(SimrunError, TimeoutError):
    """`Run.wait` ran out of time; the run goes on (wait again, or cancel it). ``view`` is
    its last view."""

    def __init__(self, run_id: str, timeout_s: float, view: RunView | None) -> None:
        self.run_id = run_id
        self.view = view
        super().__init__(timeout_text(run_id, timeout_s, view))


class Backend(Protocol):
    """Where a run lives: a service (`simrun.app.follow.RemoteReader`) or an embedded
    session (`simrun.local.session.EmbeddedSession`); coroutines of the API's loop."""

    async def view(self, run_id: str) -> RunView: ...

    async def failures(self, run_id: str) -> list[FailureView]: ...

    async def follow(self, run_id: str, view: ProgressView) -> FollowEnd: ...

    async def cancel(self, run_id: str) -> int: ...


class _Forward:
    """A progress view that hands each view to a callback (the caller's thread shows it)."""

    def __init__(self, on_view: Callable[[RunView], None]) -> None:
        self.on_view = on_view

    def update(self, run: RunView) -> None:
        self.on_view(run)

    def close(self) -> None:
        """Nothing to close: the caller's display is its own."""


def remote(client: Client) -> RemoteReader:
    """The backend of a service's runs; its connections close with the last `Run`."""
    reader = RemoteReader(client, POLL_S)
    weakref.finalize(reader, client.close)
    return reader


class Run:
    """A run that was submitted: `view` reads it, `wait` follows it to its end, `cancel`
    cancels it. Made by `simrun.submit` and `simrun.LocalSession.submit`."""

    def __init__(self, run_id: str, backend: Backend, bridge: Bridge) -> None:
        self.id = run_id
        self._backend = backend
        self._bridge = bridge

    def __repr__(self) -> str:
        return f"Run({self.id!r})"

    async def _result(self, view: RunView | None = None) -> RunResult:
        if view is None:
            view = await self._backend.view(self.id)
        return result_of(view, await self._backend.failures(self.id))

    def view(self) -> RunResult:
        """The run as it is now."""
        return self._bridge.call(self._result())

    def cancel(self) -> int:
        """Cancel the run: nothing more is dispatched; the units in flight (their count is
        returned) are dropped."""
        return self._bridge.call(self._backend.cancel(self.id))

    def wait(self, timeout_s: float | None = None, *, progress: bool = True) -> RunResult:
        """Follow the run to its end (with a display unless not ``progress``) and return its
        last view; `RunTimeout` after ``timeout_s``, `simrun.LocalError` when an embedded
        session cannot finish it."""
        views: queue.SimpleQueue[RunView] = queue.SimpleQueue()
        future = self._bridge.submit(self._backend.follow(self.id, _Forward(views.put)))
        display = make_display(progress)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        latest: RunView | None = None
        try:
            while True:
                done = future.done()  # before the queue is read: its last view is in it
                latest = _drain(views, latest, display, deadline)
                if done:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    assert timeout_s is not None
                    raise RunTimeout(self.id, timeout_s, latest)
        finally:
            future.cancel()  # a no-op once it is done
            if display is not None:
                display.close()
        outcome = future.result()
        if outcome.reason in ("stuck", "problem"):
            what = "cannot go on" if outcome.reason == "stuck" else "stopped: the session failed"
            raise LocalError(f"run {self.id} {what}: {outcome.detail}")
        return self._bridge.call(self._result(outcome.run))


def _drain(
    views: queue.SimpleQueue[RunView],
    latest: RunView | None,
    display: ProgressView | None,
    deadline: float | None,
) -> RunView | None:
    """Wait for views a tick at most (less near ``deadline``), show the newest; it."""
    wait_s = TICK_S if deadline is None else max(0.0, min(TICK_S, deadline - time.monotonic()))
    fresh: RunView | None = None
    try:
        fresh = views.get(timeout=wait_s) if wait_s > 0 else views.get_nowait()
        while True:
            fresh = views.get_nowait()
    except queue.Empty:
        pass
    if fresh is not None and display is not None:
        display.update(fresh)
    return fresh or latest
