"""The words of the wire: job kinds, unit outcomes, unit keys, job ids, and the msgpack
codec of jobs and results (never pickle)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, get_args

import msgpack

__all__ = [
    "JOB_KINDS",
    "OUTCOMES",
    "RUN_ID",
    "JobKind",
    "Outcome",
    "PayloadError",
    "UnitKey",
    "deserialize",
    "job_id",
    "serialize",
    "unit_field",
]

JobKind = Literal["chunk", "merge", "command"]
Outcome = Literal["done", "failed", "killed", "timeout", "not_run", "stale", "refused"]
#: A unit index of a chunk, or "merge" / "command" for the one piece of those jobs.
UnitKey = int | str

JOB_KINDS: tuple[str, ...] = get_args(JobKind)
OUTCOMES: tuple[str, ...] = get_args(Outcome)
#: The shape of a run id (`simrun.service.submit.new_run_id`): ``20250101-120000-1a2b3c``.
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]+")


class PayloadError(ValueError):
    """A job payload, report entry or heartbeat that cannot be used, and why."""


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


def serialize(obj: Any) -> bytes:
    """msgpack bytes of plain data: the job and result serializer given to arq."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def deserialize(data: bytes) -> dict[str, Any]:
    """The dict that `serialize` wrote; `PayloadError` for anything else.

    A pickle (what arq writes by default, and what an attacker with access to Redis would
    write to run code on a worker) is recognised by its protocol header and refused
    without being unpickled; other non-msgpack bytes are refused as well.
    """
    if len(data) >= 2 and data[0] == 0x80 and data[1] <= 5:
        raise PayloadError(
            f"refused a pickled payload (pickle protocol {data[1]}): simrun jobs are msgpack, "
            "and unpickling data from Redis would run arbitrary code; enqueue jobs with "
            "simrun.queues.JobQueue or pass job_serializer=simrun.core.wire.serialize to arq"
        )
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise PayloadError(
            f"refused a payload that is not msgpack ({type(exc).__name__}: {exc}); "
            f"it starts with {data[:16]!r}"
        ) from exc
    if not isinstance(obj, dict):
        raise PayloadError(f"refused a payload that is a {type(obj).__name__}, not a map")
    return obj
