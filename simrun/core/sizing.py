"""The sizing rules the service and the workers both apply: which queue a job goes to,
what a job asks of a worker container (memory, process slots, GPUs), how many units go in
one job, the memory of a retry after a kill, why no worker can ever run a job, and whether
a task of a key with no history sends a probe ahead of its other units (`probe_units`).

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

#: `probe_units`: a task of fewer units is never probed (one or two units: the probe would
#: be half of it or all of it, and the rest would wait a whole unit for a figure it barely
#: uses).
PROBE_MIN_UNITS = 3
#: `probe_units`: a task of at least this many units per process (waves) is worth probing
#: whatever its units last: the wait adds at most about 1/waves to its time.
PROBE_MIN_WAVES = 4
#: `probe_units`: a task whose units are known to last at most this (seconds) is worth
#: probing even with few waves: the rest waits at most about this long.
PROBE_MAX_WAIT_S = 600.0
#: `probe_units`: the probe holds at most this many units (one per process up to it).
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


@dataclass(frozen=True)
class WorkerCapacity:
    """What one live worker container can run: memory in GiB, process slots, GPUs, the
    queues it serves, and the free space of its local scratch directory in GiB (None: not
    said, taken as enough)."""

    id: str
    queues: tuple[str, ...]
    memory_gb: float
    processes: int
    gpus: int
    scratch_gb: float | None = None


class QueueName(str):
    """A logical queue: ``cpu``, ``gpu`` or ``image:NAME`` (`image_queue`). A str, so it
    goes as one into keys, payloads and labels; ``QueueName(text)`` checks a name read back
    from text, and `worker` names the worker containers that serve the queue."""

    __slots__ = ()

    def __new__(cls, name: str) -> QueueName:
        image = name.removeprefix("image:")
        if name not in ("cpu", "gpu") and (image == name or not _SAFE_QUEUE.fullmatch(image)):
            raise PayloadError(f"queue {name!r} is not cpu, gpu or image:<name>")
        return super().__new__(cls, name)

    @property
    def worker(self) -> str:
        """The name of the queue's workers, a DNS-1123 label of at most `WORKER_NAME_MAX`
        characters, distinct for distinct queues: cpu, gpu; ``image-NAME`` when NAME is
        already such a label (``image:solver``), else its letters and digits in lower case
        and ``--`` and a digest of the queue (``image:Solver_2.1`` ->
        ``image-solver-2-1--3c1f0a2b``; no kept name holds ``--``)."""
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
    """The queue of a task image, ``image:NAME``: a name of letters, digits, ``.``, ``_``
    and ``-`` kept, any other (a registry path) with those characters made ``_`` and a
    digest of it appended, so that two images never share a queue."""
    if not image or not image.strip():
        raise PayloadError("image name is empty")
    if _SAFE_QUEUE.fullmatch(image):
        return QueueName(f"image:{image}")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", image)
    digest = hashlib.sha256(image.encode()).hexdigest()[:8]
    return QueueName(f"image:{safe}-{digest}")


def queue_name(image: str | None, gpus: int) -> QueueName:
    """The queue of a task or job: its image's queue, else gpu when it needs a GPU, else
    cpu."""
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


#: Rounding slack of memory comparisons (0.1 + 0.2 GiB fits in 0.3 GiB).
SLACK_GB = 1e-9


def parallel_slots(
    kind: str,
    queue: str,
    base_gb: float,
    per_worker_gb: float,
    gpus: int,
    uses_cores: bool,
    workers: Sequence[WorkerCapacity],
) -> int:
    """How many units of a task ``workers`` run at once: per worker of ``queue``, the
    processes whose memory (and GPUs) fit in the container; one for a command that some
    worker can hold, else none. The dry run's and the Editor's forecasts both count so."""
    serving = [w for w in workers if queue in w.queues]
    if kind == "command":
        fits = any(
            request_gb("command", base_gb, per_worker_gb, w.processes, uses_cores)
            <= w.memory_gb + SLACK_GB
            and gpus <= w.gpus
            for w in serving
        )
        return 1 if fits else 0
    total = 0
    for w in serving:
        slots = w.processes
        if per_worker_gb > 0:
            slots = min(slots, math.floor(w.memory_gb / per_worker_gb + SLACK_GB))
        if gpus > 0:
            slots = min(slots, w.gpus // gpus)
        total += max(0, slots)
    return total


def fit_problem(
    kind: str,
    queue: str,
    base_gb: float,
    per_worker_gb: float,
    gpus: int,
    uses_cores: bool,
    workers: Sequence[WorkerCapacity],
    scratch_gb: float = 0.0,
) -> str | None:
    """Why no live worker of ``queue`` can ever run this job, or None when one can (or when
    none is live yet: jobs then wait in the queue for one to come).

    The message names the request and the largest worker: "needs 40 GiB per process; the
    largest cpu worker has 16 GiB", or, for the local scratch a task asks for
    (``scratch_gb``), "needs 50 GiB of local scratch; the cpu worker with the most has
    12 GiB free".
    """
    serving = [w for w in workers if queue in w.queues]
    if not serving:
        return None
    for w in serving:
        need = request_gb(kind, base_gb, per_worker_gb, w.processes, uses_cores)
        if (
            need <= w.memory_gb + 1e-9
            and request_gpus(kind, gpus) <= w.gpus
            and scratch_fits(scratch_gb, w.scratch_gb)
        ):
            return None
    if not any(scratch_fits(scratch_gb, w.scratch_gb) for w in serving):
        most = max(w.scratch_gb or 0.0 for w in serving)
        return (
            f"needs {scratch_gb:g} GiB of local scratch; the {queue} worker with the most has "
            f"{most:.3g} GiB free"
        )
    serving = [w for w in serving if scratch_fits(scratch_gb, w.scratch_gb)]
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


def scratch_fits(need_gb: float, free_gb: float | None) -> bool:
    """Whether a worker whose local scratch has ``free_gb`` free (None: not said) can give a
    task the ``need_gb`` of scratch it asks for."""
    return need_gb <= 0 or free_gb is None or need_gb <= free_gb + 1e-9


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
    """How many units of a task whose key has no history go out first, alone, as a probe:
    0 for none (every unit goes out at once with the hint), else the size of the probe.

    ``units`` are the task's chunk units, ``processes`` the worker processes serving its
    queue now (0 while no worker is live: counted as one), ``seconds_per_unit`` what one
    unit is expected to last (None when unknown: nothing learned, no forecast).

    What a probe costs: the rest of the task goes out once the first probe unit reported,
    about one unit's duration ``t`` after the start. The probe holds one unit per process
    (each in a job of its own), so when it fills every process the first wave runs as it
    would have anyway and little is lost; what is lost is the processes the probe leaves
    idle for that ``t`` (at most all but one: the wait is at most ``t``). A task of
    ``units`` over ``processes`` runs in about ``waves = units / processes`` times ``t``, so
    the wait adds at most ``1 / waves`` of its time: little for many waves, a lot when
    ``units <= processes`` (a task of 2 units on 2 processes would take twice as long).

    What it saves: every unit but the probe's runs under the learned request instead of the
    hint, and a hint is often several times what a unit needs (or too small, and then the
    probe's kill raises the rest before they are all killed too).

    The rule: never for fewer than ``min_units`` units; otherwise probe when the task has at
    least ``min_waves`` waves (the wait is at most ``1 / min_waves`` of its time, whatever
    ``t`` is), or when ``t`` is known to be at most ``max_wait_s`` (the wait is short in
    absolute terms; a 10-second key is worth probing, a 3-hour key with a few units per
    process is not). The probe is one unit per process, at least one, at most
    ``max_units`` (each probe unit runs at the hint, and a hint too small costs each of
    them a kill) and at most half the task (so that most of it gets the learned figure).
    """
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
    """The status of a task while its probe runs: "probing: 2 units first, the other 998
    wait for their memory" (`is_probing` recognises it)."""
    first = f"{probe} unit{'s' if probe != 1 else ''}"
    return f"{PROBING}: {first} first, the other {rest} wait for their memory"


def is_probing(status: str) -> bool:
    """Whether a task's status says it probes (`probe_status`)."""
    return status.startswith(f"{PROBING}:")
