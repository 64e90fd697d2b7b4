"""The one wait of the tests: poll a condition until it holds, or fail naming what was
awaited. `wait_until` for plain code, `until` for coroutines (its condition may be a
plain or a coroutine function)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds between two polls: short against the waits, long against a poll's cost.
POLL_S = 0.05


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message names it."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    check: Callable[[], None] | None = None,
    poll_s: float = POLL_S,
) -> T:
    """The first true value of ``condition``; ``check`` runs between polls and raises when
    waiting is pointless (a process that ended). `WaitTimeout` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def still_running(task: asyncio.Future[Any]) -> Callable[[], None]:
    """The ``check`` of a wait on what a background ``task`` does: raises its error, or
    says it ended."""

    def check() -> None:
        assert not task.done(), task.result()

    return check


async def until(
    condition: Callable[[], Awaitable[T]] | Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    check: Callable[[], None] | None = None,
    poll_s: float = POLL_S,
) -> T:
    """`wait_until` on an event loop: the condition may be a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        result: Any = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[no-any-return]  # an awaited T is a T
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(poll_s)
