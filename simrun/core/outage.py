"""Riding out a Redis outage, the rules both sides share (pure): the pause before the
next try (`backoff_s`) and the state of the link (`LinkState`: one log line when Redis
goes, one when it is back).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The pause after the first failed try.
RECONNECT_FIRST_S = 0.1
#: The longest pause between two tries (``simrun worker --redis-retry-max-s``). The
#: service waits this much more than a heartbeat's time to live after Redis is back
#: before it judges workers by their heartbeats (`simrun.service.decisions.judging`).
RECONNECT_MAX_S = 5.0
#: Seconds a call to Redis (or a connection attempt) may take before it fails
#: (``--redis-timeout-s``): also how long a Redis that stopped answering without closing
#: its connections (a partition, a frozen server) goes unnoticed after the next call.
REDIS_TIMEOUT_S = 5.0


def backoff_s(
    failures: int,
    jitter: float,
    *,
    first_s: float = RECONNECT_FIRST_S,
    max_s: float = RECONNECT_MAX_S,
) -> float:
    """The pause after ``failures`` failed tries in a row: ``first_s`` doubled per failure,
    capped at ``max_s``, times ``0.5 + jitter / 2`` (so clients do not come back in step)."""
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
    """The link to Redis as its user sees it: up, or down since ``down_since`` after
    ``failures`` failed tries. `lost` and `back` say whether the call changed the state
    (log a line then, and only then)."""

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
