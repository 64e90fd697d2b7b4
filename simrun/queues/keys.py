"""Names: every Redis key and queue of a simrun namespace, job ids, and the words of the
wire formats (job kinds, unit outcomes)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "DEFAULT_PREFIX",
    "JOB_FUNCTION",
    "JOB_KINDS",
    "OUTCOMES",
    "RUN_ID",
    "JobKind",
    "Keys",
    "Outcome",
    "PayloadError",
    "UnitKey",
    "image_queue",
    "job_id",
    "unit_field",
]

DEFAULT_PREFIX = "simrun"
#: The name under which the worker registers its one arq job function.
JOB_FUNCTION = "simrun_job"

JobKind = Literal["chunk", "merge", "command"]
Outcome = Literal["done", "failed", "killed", "timeout", "not_run", "stale", "refused"]
#: A unit index of a chunk, or "merge" / "command" for the one piece of those jobs.
UnitKey = int | str

JOB_KINDS: tuple[str, ...] = get_args(JobKind)
OUTCOMES: tuple[str, ...] = get_args(Outcome)
_SAFE_QUEUE = re.compile(r"[A-Za-z0-9._-]+")
#: The shape of a run id (`simrun.service.submit.new_run_id`): ``20250101-120000-1a2b3c``.
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]+")
#: The characters a SCAN pattern gives a meaning to.
_GLOB = re.compile(r"[*?\[\]\\]")


class PayloadError(ValueError):
    """A job payload, report entry or heartbeat that cannot be used, and why."""


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


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one simrun namespace (``prefix``, "simrun" by default)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.prefix or any(c.isspace() for c in self.prefix):
            raise PayloadError(f"key prefix {self.prefix!r} is empty or holds white space")

    def queue(self, name: str) -> str:
        """The arq queue (a sorted set) of logical queue ``name``: cpu, gpu or image:…."""
        if name not in ("cpu", "gpu") and not name.startswith("image:"):
            raise PayloadError(f"queue {name!r} is not cpu, gpu or image:<name>")
        return f"{self.prefix}:queue:{name}"

    @property
    def reports(self) -> str:
        """The stream every worker adds its `ReportEntry` to."""
        return f"{self.prefix}:reports"

    def worker(self, worker_id: str) -> str:
        """The heartbeat key of one worker container (expires unless refreshed)."""
        return f"{self.prefix}:worker:{worker_id}"

    @property
    def workers(self) -> str:
        """Sorted set of worker ids scored by their last heartbeat (unix seconds)."""
        return f"{self.prefix}:workers"

    def attempts(self, run: str, task: str) -> str:
        """Hash of the current attempt of each unit of a task (see `unit_field`)."""
        return f"{self.prefix}:attempts:{run}:{task}"

    @property
    def attempts_pattern(self) -> str:
        """The SCAN pattern of every attempts hash of this namespace (the prefix's glob
        characters escaped)."""
        escaped = _GLOB.sub(lambda m: "\\" + m.group(0), self.prefix)
        return f"{escaped}:attempts:*"

    def split_attempts(self, key: str) -> tuple[str, str]:
        """The run and the task of an attempts hash of this namespace. The run must have
        the shape of a run id (`RUN_ID`), so that the key of a namespace whose prefix
        begins with ``<this prefix>:attempts:`` is not taken for one of ours."""
        head = f"{self.prefix}:attempts:"
        run, sep, task = key[len(head) :].partition(":")
        if not key.startswith(head) or not sep or not RUN_ID.fullmatch(run) or not task:
            raise PayloadError(f"{key!r} is not an attempts hash of namespace {self.prefix!r}")
        return run, task

    def arq_job_id(self, job_id: str) -> str:
        """The id arq stores a job under; arq's own keys are global, so it carries the prefix."""
        return f"{self.prefix}:{job_id}"

    def job_id_from_arq(self, arq_id: str) -> str:
        """The simrun job id of an arq job id of this namespace."""
        head = f"{self.prefix}:"
        if not arq_id.startswith(head):
            raise PayloadError(f"arq job id {arq_id!r} is not of namespace {self.prefix!r}")
        return arq_id[len(head) :]


def job_id(run: str, task: str, kind: JobKind, indices: Sequence[int], attempt: int) -> str:
    """The deterministic id of a job: ``run:task:<first index>:attempt`` for a chunk,
    ``run:task:merge:attempt`` and ``run:task:command:attempt`` for the others. An id
    enqueued twice is one job, so a re-enqueue never doubles work."""
    if kind == "chunk":
        if not indices:
            raise PayloadError("a chunk job has no unit indices")
        return f"{run}:{task}:{indices[0]}:{attempt}"
    return f"{run}:{task}:{kind}:{attempt}"


def unit_field(key: UnitKey) -> str:
    """The field of a unit in the attempts hash: the index, or "merge"/"command"."""
    return str(key)
