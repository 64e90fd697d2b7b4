"""The clock the controller and the heartbeat read, injected so that tests step time."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """What reads or waits for the time."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds since an arbitrary point, never going back."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class SystemClock:
    """The real time: `time.time`, `time.monotonic`, `asyncio.sleep`."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


#: The clock of every controller and heartbeat that is given none.
SYSTEM_CLOCK: Clock = SystemClock()


class Every:
    """A period on a clock: `due` is True at first, then once ``period_s`` passed since it
    last was."""

    def __init__(self, clock: Clock, period_s: float) -> None:
        self.clock, self.period_s = clock, period_s
        self.reset()

    def reset(self) -> None:
        """Be due at the next call."""
        self._last = -float("inf")

    def due(self) -> bool:
        now = self.clock.monotonic()
        if now - self._last < self.period_s:
            return False
        self._last = now
        return True


class ManualClock:
    """A clock that moves only when told (`advance`) or slept on (``sleep`` returns at once)."""

    def __init__(self, now_s: float | None = None) -> None:
        self._now = time.time() if now_s is None else now_s
        self._monotonic = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move the time ``seconds`` (>= 0) on."""
        if seconds < 0:
            raise ValueError(f"ManualClock.advance: time does not go back ({seconds} s)")
        self._now += seconds
        self._monotonic += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)
