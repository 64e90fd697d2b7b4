"""The controller's own decisions as plain functions: the attempt of a job, which jobs are
lost or abandoned, when a run's attempts may leave Redis, and the run's message (the ETA
is `simrun.core.eta`).
(The sizing rules the workers apply as well live in `simrun.core.sizing`.)

Nothing here does I/O or reads a clock; `simrun.service.controller` gathers the facts and
acts on the answers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from simrun.core.ranges import Ranges
from simrun.core.states import ENDED_RUN_STATES


def job_attempt(unit_attempts: Iterable[int]) -> int:
    """The attempt of a job made of units with these current attempts: one more than the
    highest, so no unit of it is ever dispatched twice under one attempt."""
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
    """Jobs a worker took and died with before any heartbeat of it listed them.

    ``held`` are jobs in flight that arq holds in progress (a worker took them; arq lets no
    other worker take them for days), ``listed`` the jobs live workers' heartbeats list, and
    ``since`` when each job was first seen held and unlisted (the first answer of the last
    call). A live worker lists a job it took within one heartbeat, so a job held and listed
    by no live worker for longer than ``ttl_s`` (a heartbeat's time to live) was abandoned:
    dispatch its units again. Returns the new ``since`` (the jobs still watched; a job that
    is listed again or no longer held starts over) and the abandoned jobs, sorted.
    """
    watched = {job: since.get(job, now_s) for job in held if job not in listed}
    abandoned = sorted(job for job, first in watched.items() if now_s - first > ttl_s)
    for job in abandoned:
        del watched[job]
    return watched, abandoned


def reconnect_grace_s(heartbeat_ttl_s: float, worker_retry_max_s: float) -> float:
    """How long after Redis came back the heartbeats are not trusted to tell who died: the
    longest pause of a worker between two tries to reach Redis (it may come back that much
    later than the service), plus a heartbeat's time to live."""
    return heartbeat_ttl_s + worker_retry_max_s


def judging_workers(now_s: float, back_at: float | None, grace_s: float) -> bool:
    """Whether the heartbeats may be trusted now to say which workers died and which jobs
    were lost or abandoned. Not within ``grace_s`` of Redis coming back (``back_at``; None:
    it never went away): every heartbeat expired during the outage (or was lost with the
    data) and the workers have not all beaten again yet, so every worker would look dead
    and every job lost; their units would be computed twice."""
    return back_at is None or now_s - back_at >= grace_s


def lost_jobs(
    jobs: Iterable[FlightJob],
    queued: Collection[str],
    on_workers: Collection[str],
    snapshot_s: float,
) -> list[str]:
    """Jobs in flight that Redis no longer has: enqueued before the snapshot of the queues
    (taken at ``snapshot_s``), yet neither in a queue nor held by a live worker.

    Sound only when every report written before the snapshot was applied first: a job leaves
    its queue after its report is written, so a finished job is out of flight by then.
    """
    return [
        j.id
        for j in jobs
        if j.enqueued_s < snapshot_s and j.id not in queued and j.id not in on_workers
    ]


#: What to do with the attempts hashes of a run: ``forget`` (delete them now), ``wait``
#: (look again later), ``keep`` (the run goes on: stop looking until it ends again).
AttemptsVerdict = Literal["forget", "wait", "keep"]


def run_of_job(job_id: str) -> str:
    """The run of a job id (``run:task:…``; run ids hold no ``:``)."""
    return job_id.split(":", 1)[0]


def attempts_verdict(state: str | None, in_flight: bool, in_redis: bool) -> AttemptsVerdict:
    """Whether the attempts hashes of a run (one per task) may leave Redis now.

    The hashes only tell workers which jobs are stale, and a worker takes a unit whose
    attempt is missing for current. So they may go once the run can dispatch nothing more
    and no job of it can still be taken or run:

    * the run has ended (succeeded, failed, cancelled; ``state``), or the run store does not
      know it (``None``: no job of it can ever be dispatched);
    * no job of it is in flight in the run store (``in_flight``); and
    * no job of it is in Redis (``in_redis``): none waits in a queue, none is held in
      progress (arq keeps a taken job in its queue until it ends), none is listed by a live
      worker's heartbeat. A cancelled run's queued jobs are stale only through the raised
      attempts: its hashes stay until the workers have skipped them all.

    A running run keeps them (``keep``). A replay makes a failed run run again; its new
    jobs carry attempts one above those of the run store, and the dispatcher writes the
    hash again before it enqueues them, so a hash deleted before the replay is no loss.
    """
    if state is not None and state not in ENDED_RUN_STATES:
        return "keep"
    if in_flight or in_redis:
        return "wait"
    return "forget"


def _ranges(indices: Sequence[int]) -> str:
    """``0, 3-5, 9`` for the indices [0, 3, 4, 5, 9]."""
    return str(Ranges.of_indices(indices))


def failure_message(failed: Mapping[str, Sequence[int | str]]) -> str:
    """The message of a failed run: its failed units per task, e.g. ``2 units failed:
    sweep [3, 7-9], summary [command]``."""
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
