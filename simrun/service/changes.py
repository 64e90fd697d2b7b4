"""Change notification: who follows a run waits for a version past the one it read, woken
when it may have changed."""

from __future__ import annotations

import asyncio
import time


class Changes:
    """Per-run version counters and the event their waiters wait on (one event loop)."""

    def __init__(self) -> None:
        self._versions: dict[str, int] = {}
        #: Added to every run's version by `notify_all` (runs not seen yet included).
        self._all = 0
        self._event = asyncio.Event()
        self.closed = False

    def version(self, run_id: str) -> int:
        """The current version of ``run_id`` (0 before any change); it only grows."""
        return self._versions.get(run_id, 0) + self._all

    def _wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def notify(self, run_id: str) -> None:
        """``run_id`` changed: its version goes up and its waiters wake."""
        self._versions[run_id] = self._versions.get(run_id, 0) + 1
        self._wake()

    def notify_all(self) -> None:
        """Something changed, runs unnamed: every version goes up and every waiter wakes."""
        self._all += 1
        self._wake()

    def close(self) -> None:
        """The service stops: every waiter wakes now, and later waits return at once."""
        self.closed = True
        self.notify_all()

    async def wait(self, run_id: str, after_version: int, timeout_s: float) -> int:
        """Wait for a version of ``run_id`` past ``after_version`` (or the close, or the
        timeout): the version then."""
        deadline = time.monotonic() + timeout_s
        while self.version(run_id) <= after_version and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                break
        return self.version(run_id)
