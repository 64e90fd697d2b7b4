"""The controller's decisions as plain functions: chunk sizes, attempts, which queue, whether
any worker can ever run a request, which jobs are lost or abandoned, when a run's attempts
may leave Redis, the ETA and the run's message.

Nothing here does I/O or reads a clock; `simrun.service.controller` gathers the facts and
acts on the answers.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from simrun.core.wire import image_queue
from simrun.resources import RETRY_FACTOR

__all__ = [
    "DEFAULT_MAX_CHUNK",
    "DEFAULT_TARGET_JOB_S",
    "ENDED_RUN_STATES",
    "AttemptsVerdict",
    "FlightJob",
    "WorkerCapacity",
    "abandoned_jobs",
    "attempts_verdict",
    "chunk_size",
    "dead_worker_jobs",
    "eta_s",
    "failure_message",
    "fit_problem",
    "job_attempt",
    "lost_jobs",
    "queue_name",
    "request_gb",
    "retry_memory_gb",
    "run_of_job",
    "split",
]

#: About this much work per job once the seconds of a unit are known.
DEFAULT_TARGET_JOB_S = 1.0
#: Never more units in one job (a lost job loses at most this much work).
DEFAULT_MAX_CHUNK = 1000

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerCapacity:
    """What one live worker container can run: memory in GiB, process slots, GPUs, the
    queues it serves."""

    id: str
    queues: tuple[str, ...]
    memory_gb: float
    processes: int
    gpus: int


def queue_name(image: str | None, gpus: int) -> str:
    """The logical queue of a task: its image's queue, else gpu with GPUs, else cpu."""
    if image is not None:
        return image_queue(image)
    return "gpu" if gpus > 0 else "cpu"


def chunk_size(
    seconds_per_unit: float | None,
    pending: int,
    processes: int,
    *,
    target_s: float = DEFAULT_TARGET_JOB_S,
    max_chunk: int = DEFAULT_MAX_CHUNK,
) -> int:
    """Units per job: one while nothing is learned; else about ``target_s`` of work, but no
    more than spreads the ``pending`` units over all ``processes`` (so a small task still
    runs in parallel) and at most ``max_chunk``."""
    if seconds_per_unit is None or pending <= 1:
        return 1
    by_time = max(1, math.floor(target_s / seconds_per_unit)) if seconds_per_unit > 0 else max_chunk
    spread = max(1, math.ceil(pending / max(1, processes)))
    return max(1, min(by_time, spread, max_chunk))


def split(items: Sequence[T], size: int) -> list[tuple[T, ...]]:
    """``items`` cut into consecutive chunks of ``size`` (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    return [tuple(items[i : i + size]) for i in range(0, len(items), size)]


def job_attempt(unit_attempts: Iterable[int]) -> int:
    """The attempt of a job made of units with these current attempts: one more than the
    highest, so no unit of it is ever dispatched twice under one attempt."""
    return max(unit_attempts, default=0) + 1


def request_gb(
    kind: str, base_gb: float, per_worker_gb: float, processes: int, uses_cores: bool
) -> float:
    """The memory a job asks of a worker container with ``processes`` slots, as the worker's
    admission counts it: a chunk one process's worth, a merge the base memory, a command the
    base plus one process (or every slot of the container when it ``uses_cores``)."""
    if kind == "chunk":
        return per_worker_gb
    if kind == "merge":
        return base_gb
    return base_gb + per_worker_gb * (processes if uses_cores else 1)


def fit_problem(
    kind: str,
    queue: str,
    base_gb: float,
    per_worker_gb: float,
    gpus: int,
    uses_cores: bool,
    workers: Sequence[WorkerCapacity],
) -> str | None:
    """Why no live worker of ``queue`` can ever run this job, or None when one can (or when
    none is live yet: jobs then wait in the queue for one to come).

    The message names the request and the largest worker: "needs 40 GiB per process; the
    largest cpu worker has 16 GiB".
    """
    serving = [w for w in workers if queue in w.queues]
    if not serving:
        return None
    for w in serving:
        need = request_gb(kind, base_gb, per_worker_gb, w.processes, uses_cores)
        if need <= w.memory_gb + 1e-9 and (kind == "merge" or gpus <= w.gpus):
            return None
    largest = max(serving, key=lambda w: w.memory_gb)
    need = request_gb(kind, base_gb, per_worker_gb, largest.processes, uses_cores)
    if need > largest.memory_gb + 1e-9:
        what = {"chunk": "per process", "merge": "for its merge", "command": "for its command"}
        return (
            f"needs {need:g} GiB {what.get(kind, '')}; the largest {queue} worker has "
            f"{largest.memory_gb:g} GiB"
        )
    most = max(w.gpus for w in serving)
    return f"needs {gpus} GPU(s); the {queue} worker with the most has {most}"


def retry_memory_gb(resolved_gb: float, kills: int, last_limit_gb: float | None) -> float:
    """The memory of a unit (per process; the base memory for a merge): what is resolved
    for its key, and once it was killed for memory at least `RETRY_FACTOR` times the limit
    of its last attempt, so that its own retries grow even while the successes of other
    units keep the key's learned value low."""
    if kills > 0 and last_limit_gb:
        return max(resolved_gb, RETRY_FACTOR * last_limit_gb)
    return resolved_gb


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


#: The states of a run that has ended.
ENDED_RUN_STATES = frozenset({"succeeded", "failed", "cancelled"})

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


def eta_s(remaining_units: int, seconds_per_unit: float | None, processes: int) -> float | None:
    """Seconds until the remaining units are done: units * seconds per unit / processes.
    None while the seconds per unit or any process is unknown; 0 with nothing left."""
    if remaining_units <= 0:
        return 0.0
    if seconds_per_unit is None or processes <= 0:
        return None
    return remaining_units * seconds_per_unit / processes


def _ranges(indices: Sequence[int]) -> str:
    parts: list[str] = []
    ordered = sorted(indices)
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


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
