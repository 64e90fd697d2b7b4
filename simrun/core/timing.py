"""The timing defaults (seconds) the service and the workers must agree on: the heartbeat
interval and time to live, the grace period of a stop, and the bounds of clock skew."""

from __future__ import annotations

HEARTBEAT_S = 2.0
HEARTBEAT_TTL_S = 8.0
#: The heartbeat TTL as a multiple of the interval, kept when only the interval is given.
TTL_PER_INTERVAL = HEARTBEAT_TTL_S / HEARTBEAT_S
#: Seconds running units get to finish after a stop before they are handed back
#: (``--grace-s``).
DEFAULT_GRACE_S = 10.0
#: A worker whose clock is further than this from the Redis server's (seconds, either way)
#: is warned about: by itself and by the service (once per worker), and where it is shown.
CLOCK_SKEW_WARN_S = 5.0
#: Jobs are scored this far in the past when enqueued (arq gives a job to a worker once its
#: score is at most the worker's own clock): a worker whose clock is behind the enqueuer's
#: by less than this takes them at once. Every job is moved by the same amount, so they
#: keep their order.
ENQUEUE_BACKDATE_S = 3600.0


def clock_skew_warning(skew_s: float | None) -> str | None:
    """What to say of a worker's clock skew (its clock minus the Redis server's, seconds):
    None within `CLOCK_SKEW_WARN_S`, or when not measured."""
    if skew_s is None or abs(skew_s) <= CLOCK_SKEW_WARN_S:
        return None
    way = "ahead of" if skew_s > 0 else "behind"
    text = f"clock {abs(skew_s):.1f} s {way} Redis's (more than {CLOCK_SKEW_WARN_S:g} s)"
    if skew_s < -ENQUEUE_BACKDATE_S:  # arq: a job waits until its score <= the worker's now
        return (
            f"{text}: it takes a job only {-skew_s - ENQUEUE_BACKDATE_S:.0f} s after it is queued"
        )
    return text
