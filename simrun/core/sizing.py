"""The sizing rules the service and the workers both apply: which queue a job goes to,
what a job asks of a worker container (memory, process slots, GPUs), how many units go in
one job, the memory of a retry after a kill, and why no worker can ever run a job.

The service plans with these functions (`simrun.service.dispatch`, `simrun.service.packing`)
and the worker admits with the same ones (`simrun.worker.jobs.request_for`), so the two
sides never disagree about what a job needs. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from simrun.core.wire import PayloadError

__all__ = [
    "DEFAULT_MAX_CHUNK",
    "DEFAULT_TARGET_JOB_S",
    "WorkerCapacity",
    "chunk_size",
    "fit_problem",
    "image_queue",
    "queue_name",
    "request_gb",
    "request_gpus",
    "request_slots",
    "retry_memory_gb",
    "split",
    "split_range",
]

#: About this much work per job once the seconds of a unit are known: a job costs a few
#: milliseconds of its own (a report, a pickup, a process checkout), and the last job of a
#: task decides when it ends, so the tail of a task is tapered instead (`split`).
DEFAULT_TARGET_JOB_S = 1.0
#: The tail of a task (`split` with ``pending``): each job at most the remaining units over
#: this many times the processes, and at least the chunk size over `TAPER_FLOOR`.
TAPER_SHARE = 2
TAPER_FLOOR = 8
#: Never more units in one job (a lost job loses at most this much work).
DEFAULT_MAX_CHUNK = 1000

_SAFE_QUEUE = re.compile(r"[A-Za-z0-9._-]+")

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


def image_queue(image: str) -> str:
    """The logical queue of a task image: ``image:<name>``, made safe for a Redis key.

    A name of letters, digits, ``.``, ``_`` and ``-`` is kept; any other name (a registry
    path with ``/`` and ``:``) has those characters replaced and a short hash of the
    original appended, so that two different images never share a queue.
    """
    if not image or not image.strip():
        raise PayloadError("image name is empty")
    if _SAFE_QUEUE.fullmatch(image):
        return f"image:{image}"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", image)
    digest = hashlib.sha256(image.encode()).hexdigest()[:8]
    return f"image:{safe}-{digest}"


def queue_name(image: str | None, gpus: int) -> str:
    """The logical queue of a task or job: its image's queue, else gpu when it needs a GPU,
    else cpu."""
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


def split(
    items: Sequence[T], size: int, *, pending: int | None = None, processes: int = 1
) -> list[tuple[T, ...]]:
    """``items`` cut into consecutive chunks of ``size`` (the last may be shorter): the
    units of a task into jobs of `chunk_size` units.

    With ``pending`` (the task's pending units, ``items`` being the first of them) and
    ``items`` reaching the task's last unit, the tail is tapered so that the processes end
    together: each chunk holds at most the units left over ``TAPER_SHARE x processes``
    (guided self-scheduling), but at least ``size / TAPER_FLOOR`` (rounded up), and never
    more than ``size``. Slices that end before the task does are cut evenly.
    """
    return [tuple(items[a:b]) for a, b in _cuts(len(items), size, pending, processes)]


def split_range(
    indices: range, size: int, *, pending: int | None = None, processes: int = 1
) -> list[range]:
    """A range of unit indices cut as `split` cuts a list (the same rule, tail included),
    into ranges: no list of the indices is made."""
    return [indices[a:b] for a, b in _cuts(len(indices), size, pending, processes)]


def _cuts(n: int, size: int, pending: int | None, processes: int) -> list[tuple[int, int]]:
    """Where `split` cuts ``n`` items: (start, stop) of each chunk."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    if pending is None or n < pending or size == 1:
        return [(i, min(i + size, n)) for i in range(0, n, size)]
    share = TAPER_SHARE * max(1, processes)
    floor = max(1, math.ceil(size / TAPER_FLOOR))
    out: list[tuple[int, int]] = []
    at = 0
    while at < n:
        left = n - at
        take = min(size, left, max(floor, math.ceil(left / share)))
        out.append((at, at + take))
        at += take
    return out


def request_slots(kind: str, processes: int, uses_cores: bool) -> int:
    """The process slots a job takes in a container with ``processes`` slots: one, but all
    of them for a command whose type ``uses_cores``."""
    return processes if kind == "command" and uses_cores else 1


def request_gpus(kind: str, gpus: int) -> int:
    """The GPUs a job takes: the task's, none for a merge."""
    return 0 if kind == "merge" else gpus


def request_gb(
    kind: str, base_gb: float, per_worker_gb: float, processes: int, uses_cores: bool
) -> float:
    """The memory a job asks of a worker container with ``processes`` slots, which is also
    the limit it runs under: a chunk one process's worth, a merge the base memory, a command
    the base plus one process per slot it takes (every slot of the container when it
    ``uses_cores``)."""
    if kind == "chunk":
        return per_worker_gb
    if kind == "merge":
        return base_gb
    return base_gb + per_worker_gb * request_slots(kind, processes, uses_cores)


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
        if need <= w.memory_gb + 1e-9 and request_gpus(kind, gpus) <= w.gpus:
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


def retry_memory_gb(
    resolved_gb: float, kills: int, last_limit_gb: float | None, *, retry_factor: float
) -> float:
    """The memory of a unit (per process; the base memory for a merge): what is resolved
    for its key, and once it was killed for memory at least ``retry_factor``
    (`simrun.resources.RETRY_FACTOR`) times the limit of its last attempt, so that its own
    retries grow even while the successes of other units keep the key's learned value low."""
    if kills > 0 and last_limit_gb:
        return max(resolved_gb, retry_factor * last_limit_gb)
    return resolved_gb
