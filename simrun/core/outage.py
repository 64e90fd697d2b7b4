"""Riding out a Redis outage, the rules both sides share (pure): the pause before the next
try (`backoff_s`) and the state of the link (`LinkState`)."""

from __future__ import annotations

from dataclasses import dataclass

#: The pause after the first failed try.
RECONNECT_FIRST_S = 0.1
#: The longest pause between two tries (``--redis-retry-max-s``); also part of the
#: service's grace before it judges workers after Redis is back.
RECONNECT_MAX_S = 5.0
#: Seconds a call to Redis (or a connection attempt) may take before it fails
#: (``--redis-timeout-s``).
REDIS_TIMEOUT_S = 5.0


def backoff_s(
    failures: int,
    jitter: float,
    *,
    first_s: float = RECONNECT_FIRST_S,
    max_s: float = RECONNECT_MAX_S,
) -> float:
    """The pause after ``failures`` failed tries in a row: ``first_s`` doubled per failure up
    to ``max_s``, times ``0.5 + jitter / 2``."""
    if failures <= 0:
        return 0.0
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    if not 0 < first_s <= max_s:
        raise ValueError(f"need 0 < first_s <= max_s, got {first_s}, {max_s}")
    base = min(max_s, first_s * 2.0 ** min(failures - 1, 64))
    return base * (0.5 + jitter / 2.0)


@dataclass
class LinkState:
    """The link to Redis: up, or down since ``down_since``; `lost` and `back` say whether
    the state changed (log a line then only)."""

    down_since: float | None = None
    failures: int = 0
    #: When Redis came back last (None: it never went away).
    back_at: float | None = None
    #: The error that took it down.
    reason: str = ""

    @property
    def up(self) -> bool:
        return self.down_since is None

    def lost(self, now_s: float, reason: str) -> bool:
        """A try failed at ``now_s``; True when Redis was up until now."""
        self.failures += 1
        if self.down_since is not None:
            return False
        self.down_since, self.reason = now_s, reason
        return True

    def back(self, now_s: float) -> float | None:
        """A try succeeded at ``now_s``: how long Redis was away, or None when it was up."""
        self.failures = 0
        if self.down_since is None:
            return None
        away = max(0.0, now_s - self.down_since)
        self.down_since, self.back_at, self.reason = None, now_s, ""
        return away

    def down_for(self, now_s: float) -> float | None:
        """Seconds since Redis went away, or None while it is up."""
        return None if self.down_since is None else max(0.0, now_s - self.down_since)
