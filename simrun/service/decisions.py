"""The controller's own decisions as pure functions: a job's attempt, lost or abandoned
jobs, when a run's attempts may leave Redis, and a failed run's message."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from simrun.core.ranges import Ranges
from simrun.core.states import ENDED_RUN_STATES


def job_attempt(unit_attempts: Iterable[int]) -> int:
    """The attempt of a job of units of these attempts: one above the highest."""
    return max(unit_attempts, default=0) + 1


@dataclass(frozen=True)
class FlightJob:
    """A job in flight as the liveness checks see it."""

    id: str
    worker: str | None
    enqueued_s: float


def dead_worker_jobs(jobs: Iterable[FlightJob], live: Collection[str]) -> list[str]:
    """Jobs held by a worker whose heartbeat is gone: dispatch their units again."""
    return [j.id for j in jobs if j.worker is not None and j.worker not in live]


def abandoned_jobs(
    held: Collection[str],
    listed: Collection[str],
    since: Mapping[str, float],
    now_s: float,
    ttl_s: float,
) -> tuple[dict[str, float], list[str]]:
    """Jobs ``held`` by arq and ``listed`` by no live worker for longer than ``ttl_s``
    (``since``: first seen so): the new ``since``, and those jobs sorted."""
    watched = {job: since.get(job, now_s) for job in held if job not in listed}
    abandoned = sorted(job for job, first in watched.items() if now_s - first > ttl_s)
    for job in abandoned:
        del watched[job]
    return watched, abandoned


def reconnect_grace_s(heartbeat_ttl_s: float, worker_retry_max_s: float) -> float:
    """How long after Redis came back the heartbeats are not trusted."""
    return heartbeat_ttl_s + worker_retry_max_s


def judging_workers(now_s: float, back_at: float | None, grace_s: float) -> bool:
    """Whether the heartbeats may say now which workers died (not within ``grace_s`` of
    Redis coming back)."""
    return back_at is None or now_s - back_at >= grace_s


def lost_jobs(
    jobs: Iterable[FlightJob],
    queued: Collection[str],
    on_workers: Collection[str],
    snapshot_s: float,
) -> list[str]:
    """Jobs in flight, enqueued before the snapshot of the queues, that Redis no longer has
    (sound once every earlier report was applied)."""
    return [
        j.id
        for j in jobs
        if j.enqueued_s < snapshot_s and j.id not in queued and j.id not in on_workers
    ]


#: What to do with a run's attempts hashes: delete now, look again later, or stop looking.
AttemptsVerdict = Literal["forget", "wait", "keep"]


def run_of_job(job_id: str) -> str:
    """The run of a job id (``run:task:…``; run ids hold no ``:``)."""
    return job_id.split(":", 1)[0]


def attempts_verdict(state: str | None, in_flight: bool, in_redis: bool) -> AttemptsVerdict:
    """Whether a run's attempts hashes may leave Redis: once it ended (or is unknown) and
    no job of it is in flight in the store or in Redis."""
    if state is not None and state not in ENDED_RUN_STATES:
        return "keep"
    if in_flight or in_redis:
        return "wait"
    return "forget"


def _ranges(indices: Sequence[int]) -> str:
    """``0, 3-5, 9`` for the indices [0, 3, 4, 5, 9]."""
    return str(Ranges.of_indices(indices))


def failure_message(failed: Mapping[str, Sequence[int | str]]) -> str:
    """A failed run's message: ``2 units failed: sweep [3, 7-9], summary [command]``."""
    total = sum(len(v) for v in failed.values())
    if total == 0:
        return "failed: a task could not run"
    parts = []
    for task, keys in sorted(failed.items()):
        if not keys:
            continue
        numbers = [k for k in keys if isinstance(k, int)]
        names = sorted(str(k) for k in keys if not isinstance(k, int))
        shown = ", ".join(filter(None, [_ranges(numbers) if numbers else "", *names]))
        parts.append(f"{task} [{shown}]")
    return f"{total} unit{'s' if total != 1 else ''} failed: " + ", ".join(parts)
