"""The sizing rules the service and the workers share: a job's queue, what it asks of a
worker, units per job, a retry's memory, why no worker fits it, and a task's probe."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from simrun.core.wire import PayloadError

#: About this much work per job once the seconds of a unit are known.
DEFAULT_TARGET_JOB_S = 1.0
#: The tapered tail of a task (`split`): jobs of the units left over this many times the
#: processes, at least the chunk size over `TAPER_FLOOR`.
TAPER_SHARE = 2
TAPER_FLOOR = 8
#: Never more units in one job (a lost job loses at most this much work).
DEFAULT_MAX_CHUNK = 1000

#: The bounds of `probe_units`.
PROBE_MIN_UNITS = 3
PROBE_MIN_WAVES = 4
PROBE_MAX_WAIT_S = 600.0
PROBE_MAX_UNITS = 8
#: The first word of the status of a task that probes (`probe_status`, `is_probing`).
PROBING = "probing"

_SAFE_QUEUE = re.compile(r"[A-Za-z0-9._-]+")
#: A DNS-1123 label (a Kubernetes name, a compose service name) with no ``--`` in it.
_LABEL = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
#: The longest name of a queue's workers: ``simrun-worker-<name>`` is a label (63 at most).
WORKER_NAME_MAX = 63 - len("simrun-worker-")

T = TypeVar("T")

#: Bytes in one GiB: every ``*_gb`` figure of simrun is in GiB.
GIB = 2**30
#: Rounding slack of memory comparisons (0.1 + 0.2 GiB fits in 0.3 GiB).
SLACK_GB = 1e-9


@dataclass(frozen=True)
class WorkerCapacity:
    """What one live worker container can run (its free scratch GiB: None is enough)."""

    id: str
    queues: tuple[str, ...]
    memory_gb: float
    processes: int
    gpus: int
    scratch_gb: float | None = None


class QueueName(str):
    """A logical queue, ``cpu``, ``gpu`` or ``image:NAME``, checked when made; `worker` names
    the workers that serve it."""

    __slots__ = ()

    def __new__(cls, name: str) -> QueueName:
        image = name.removeprefix("image:")
        if name not in ("cpu", "gpu") and (image == name or not _SAFE_QUEUE.fullmatch(image)):
            raise PayloadError(f"queue {name!r} is not cpu, gpu or image:<name>")
        return super().__new__(cls, name)

    @property
    def worker(self) -> str:
        """The queue's workers' name, a DNS-1123 label distinct per queue: ``image-NAME``,
        else a slug and a digest (``image:Solver_2.1`` -> ``image-solver-2-1--3c1f0a2b``)."""
        if not self.startswith("image:"):
            return str(self)
        name = "image-" + self.removeprefix("image:")
        if _LABEL.fullmatch(name) and len(name) <= WORKER_NAME_MAX:
            return name
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower())[: WORKER_NAME_MAX - 10].strip("-")
        return f"{slug}--{hashlib.sha256(self.encode()).hexdigest()[:8]}"

    @property
    def compose_service(self) -> str:
        """The docker compose service of the queue's workers (docker-compose.yml)."""
        return f"worker-{self.worker}"

    @property
    def deployment(self) -> str:
        """The Kubernetes Deployment of the queue's workers (deploy/kubernetes/)."""
        return f"simrun-worker-{self.worker}"


CPU = QueueName("cpu")
GPU = QueueName("gpu")


def image_queue(image: str) -> QueueName:
    """The queue of a task image, ``image:NAME``; a name not safe as it is gets a digest, so
    two images never share a queue."""
    if not image or not image.strip():
        raise PayloadError("image name is empty")
    if _SAFE_QUEUE.fullmatch(image):
        return QueueName(f"image:{image}")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", image)
    digest = hashlib.sha256(image.encode()).hexdigest()[:8]
    return QueueName(f"image:{safe}-{digest}")


def queue_name(image: str | None, gpus: int) -> QueueName:
    """The queue of a task or job: its image's, else gpu when it needs a GPU, else cpu."""
    if image is not None:
        return image_queue(image)
    return GPU if gpus > 0 else CPU


def chunk_size(
    seconds_per_unit: float | None,
    pending: int,
    processes: int,
    *,
    target_s: float = DEFAULT_TARGET_JOB_S,
    max_chunk: int = DEFAULT_MAX_CHUNK,
) -> int:
    """Units per job: one while nothing is learned, else about ``target_s`` of work within
    ``pending`` spread over ``processes`` and ``max_chunk``."""
    if seconds_per_unit is None or pending <= 1:
        return 1
    by_time = max(1, math.floor(target_s / seconds_per_unit)) if seconds_per_unit > 0 else max_chunk
    spread = max(1, math.ceil(pending / max(1, processes)))
    return max(1, min(by_time, spread, max_chunk))


def split(
    items: Sequence[T], size: int, *, pending: int | None = None, processes: int = 1
) -> list[tuple[T, ...]]:
    """``items`` cut into chunks of ``size``; when they reach the task's last unit
    (``pending``), the tail tapers so that the processes end together."""
    return [tuple(items[a:b]) for a, b in _cuts(len(items), size, pending, processes)]


def split_range(
    indices: range, size: int, *, pending: int | None = None, processes: int = 1
) -> list[range]:
    """A range of unit indices cut as `split` cuts a list, into ranges."""
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
    """The process slots a job takes: one, but all for a command that ``uses_cores``."""
    return processes if kind == "command" and uses_cores else 1


def request_gpus(kind: str, gpus: int) -> int:
    """The GPUs a job takes: the task's, none for a merge."""
    return 0 if kind == "merge" else gpus


def request_gb(
    kind: str, base_gb: float, per_worker_gb: float, processes: int, uses_cores: bool
) -> float:
    """The memory a job asks of (and is limited to in) a container of ``processes`` slots."""
    if kind == "chunk":
        return per_worker_gb
    if kind == "merge":
        return base_gb
    return base_gb + per_worker_gb * request_slots(kind, processes, uses_cores)


@dataclass(frozen=True)
class JobShape:
    """What a job or a task's units ask of a worker of ``queue``, as sizing judges them."""

    kind: str
    queue: str
    base_gb: float
    per_worker_gb: float
    gpus: int = 0
    uses_cores: bool = False
    scratch_gb: float = 0.0

    def need_gb(self, processes: int) -> float:
        """`request_gb` of the job on a worker of ``processes`` slots."""
        return request_gb(self.kind, self.base_gb, self.per_worker_gb, processes, self.uses_cores)


def parallel_slots(job: JobShape, workers: Sequence[WorkerCapacity]) -> int:
    """How many units of a task ``workers`` run at once (for a command: 1 when one fits)."""
    serving = [w for w in workers if job.queue in w.queues]
    if job.kind == "command":
        fits = any(
            job.need_gb(w.processes) <= w.memory_gb + SLACK_GB and job.gpus <= w.gpus
            for w in serving
        )
        return 1 if fits else 0
    total = 0
    for w in serving:
        slots = w.processes
        if job.per_worker_gb > 0:
            slots = min(slots, math.floor(w.memory_gb / job.per_worker_gb + SLACK_GB))
        if job.gpus > 0:
            slots = min(slots, w.gpus // job.gpus)
        total += max(0, slots)
    return total


def fit_problem(job: JobShape, workers: Sequence[WorkerCapacity]) -> str | None:
    """Why no live worker of the job's queue can ever run it, or None (also while none is
    live)."""
    queue = job.queue
    serving = [w for w in workers if queue in w.queues]
    if not serving:
        return None
    for w in serving:
        if (
            job.need_gb(w.processes) <= w.memory_gb + SLACK_GB
            and request_gpus(job.kind, job.gpus) <= w.gpus
            and scratch_fits(job.scratch_gb, w.scratch_gb)
        ):
            return None
    if not any(scratch_fits(job.scratch_gb, w.scratch_gb) for w in serving):
        most = max(w.scratch_gb or 0.0 for w in serving)
        return (
            f"needs {job.scratch_gb:g} GiB of local scratch; the {queue} worker with the most "
            f"has {most:.3g} GiB free"
        )
    serving = [w for w in serving if scratch_fits(job.scratch_gb, w.scratch_gb)]
    largest = max(serving, key=lambda w: w.memory_gb)
    need = job.need_gb(largest.processes)
    if need > largest.memory_gb + SLACK_GB:
        what = {"chunk": "per process", "merge": "for its merge", "command": "for its command"}
        return (
            f"needs {need:g} GiB {what.get(job.kind, '')}; the largest {queue} worker has "
            f"{largest.memory_gb:g} GiB"
        )
    most = max(w.gpus for w in serving)
    return f"needs {job.gpus} GPU(s); the {queue} worker with the most has {most}"


def scratch_fits(need_gb: float, free_gb: float | None) -> bool:
    """Whether a worker with ``free_gb`` of scratch free (None: not said) gives ``need_gb``."""
    return need_gb <= 0 or free_gb is None or need_gb <= free_gb + SLACK_GB


def retry_memory_gb(
    resolved_gb: float, kills: int, last_limit_gb: float | None, *, retry_factor: float
) -> float:
    """The memory of a unit: its key's, and once killed for memory at least ``retry_factor``
    times its last limit."""
    if kills > 0 and last_limit_gb:
        return max(resolved_gb, retry_factor * last_limit_gb)
    return resolved_gb


def probe_units(
    units: int,
    processes: int,
    seconds_per_unit: float | None,
    *,
    min_units: int = PROBE_MIN_UNITS,
    min_waves: float = PROBE_MIN_WAVES,
    max_wait_s: float = PROBE_MAX_WAIT_S,
    max_units: int = PROBE_MAX_UNITS,
) -> int:
    """How many units of a task whose key has no history go out first as a probe (0: none):
    one per process, at most ``max_units`` and half the task, for a task of ``min_units`` or
    more with ``min_waves`` waves or units known to take at most ``max_wait_s``."""
    if units < max(min_units, 2):
        return 0
    slots = max(1, processes)
    size = max(1, min(slots, max_units, units // 2))
    if units / slots >= min_waves:
        return size
    if seconds_per_unit is not None and seconds_per_unit <= max_wait_s:
        return size
    return 0


def probe_status(probe: int, rest: int) -> str:
    """The status of a task while its probe runs (`is_probing` recognises it)."""
    first = f"{probe} unit{'s' if probe != 1 else ''}"
    return f"{PROBING}: {first} first, the other {rest} wait for their memory"


def is_probing(status: str) -> bool:
    """Whether a task's status says it probes (`probe_status`)."""
    return status.startswith(f"{PROBING}:")
