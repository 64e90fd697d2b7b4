"""Change notification: who follows a run is woken when it may have changed, instead of
asking again on a timer.

`Changes` keeps a version per run (a counter that only grows). The controller calls
`Changes.notify` with a run's id where a command changed that run (submit, replay, cancel)
and `Changes.notify_all` after a step that changed something (a step does not say which
runs). A follower reads the version, reads the run, then `Changes.wait` for a version past
the one it read: nothing that happens between its read and its wait is missed. A wake-up
means "may have changed": the follower reads again and compares (the HTTP stream sends an
event only when the run's view differs).

The waiters wait on one `asyncio.Event` that every notification sets and replaces: a
condition variable without its lock, so that notifying is a plain call (the controller does
not await it) and costs nothing while nobody waits. `Changes.close` (the service stops)
wakes every waiter for good; the streams then end.
"""

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
        """Wait until the version of ``run_id`` is past ``after_version``, the changes are
        closed, or ``timeout_s`` passed; the version then."""
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
