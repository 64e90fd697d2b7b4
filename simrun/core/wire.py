"""The words of the wire: job kinds, unit outcomes, unit keys, job ids, the field types the
wire models are built of (`FiniteNonNeg` and friends), how a refused model is explained
(`explain`), and the msgpack codec of jobs and results (never pickle)."""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgpack
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from simrun.errors import SimrunError

JobKind = Literal["chunk", "merge", "command"]
Outcome = Literal["done", "failed", "killed", "timeout", "not_run", "stale", "refused"]
#: A unit index of a chunk, or "merge" / "command" for the one piece of those jobs.
UnitKey = int | str

JOB_KINDS: tuple[str, ...] = get_args(JobKind)
OUTCOMES: tuple[str, ...] = get_args(Outcome)
#: The shape of a run id (`simrun.service.submit.new_run_id`): ``20250101-120000-1a2b3c``.
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]+")


class PayloadError(SimrunError, ValueError):
    """A job payload, report entry or heartbeat that cannot be used, and why."""


# The field types of the wire models, strict (a bool is no number, a string no number, a
# number no bool); each description completes "field 'x' must be ..." (`explain`).
#: The one rule for memory, seconds and sizes on the wire (an int is taken as a float).
FiniteNonNeg = Annotated[
    float, Field(strict=True, ge=0, allow_inf_nan=False, description="a finite number >= 0")
]
#: A limit or a timeout, where 0 means nothing sensible.
FinitePositive = Annotated[
    float, Field(strict=True, gt=0, allow_inf_nan=False, description="a finite number > 0")
]
Count = Annotated[int, Field(strict=True, ge=0, description="an integer >= 0")]
Attempt = Annotated[int, Field(strict=True, ge=1, description="an integer >= 1")]
Flag = Annotated[bool, Field(strict=True, description="true or false")]
NonEmptyStr = Annotated[str, Field(strict=True, min_length=1, description="a non-empty string")]

_FINITE_NONNEG: TypeAdapter[float] = TypeAdapter(FiniteNonNeg)


def is_finite_nonneg(value: object) -> bool:
    """Whether ``value`` passes `FiniteNonNeg` (for checks outside a model)."""
    try:
        _FINITE_NONNEG.validate_python(value)
    except ValidationError:
        return False
    return True


def _must(info: FieldInfo) -> str | None:
    """What a field must be: its description, else that of its annotated type; "or null"
    when it is optional."""
    if info.description:
        return info.description
    annotation = info.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        args = get_args(annotation)
        for arg in args:
            for meta in getattr(arg, "__metadata__", ()):
                if isinstance(meta, FieldInfo) and meta.description:
                    return meta.description + (" or null" if type(None) in args else "")
    return None


@dataclass
class _Place:
    """Where an error of a model is: the field's name, the nested models on the way to it,
    its `FieldInfo`, the fields known where it is, and the steps past it (keys, indices)."""

    name: str = ""
    parents: list[str] = field(default_factory=list)
    info: FieldInfo | None = None
    known: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)


def _place(model: type[BaseModel], loc: list[str]) -> _Place:
    """The place of an error at ``loc`` in ``model``, going into nested models."""
    found = _Place(rest=list(loc))
    current = model
    while found.rest:
        part = found.rest.pop(0)
        fields = current.model_fields
        found.known, found.info, found.name = sorted(fields), fields.get(part), part
        nested = found.info.annotation if found.info is not None else None
        if not (found.rest and isinstance(nested, type) and issubclass(nested, BaseModel)):
            break
        found.parents.append(part)
        current = nested
    return found


def _must_be(error: Any, at: _Place, dotted: bool) -> str:
    """What a field must be, for the error of a value."""
    if error["type"] == "literal_error":
        return f"one of {error['ctx']['expected']}"
    must = _must(at.info) if at.info is not None and not (dotted and at.rest) else None
    if must is None:
        must = error["msg"][0].lower() + error["msg"][1:]
        must = must.removeprefix("input should be ")
    return str(must)


def explain(
    exc: ValidationError, model: type[BaseModel], where: str = "", *, dotted: bool = False
) -> str:
    """One sentence about the first error of ``exc`` (raised validating ``model``): a missing
    or unknown field, what a field "must be" and what it got, or a validator's message; a
    nested field is named ``'paths.out'`` with ``dotted``, else it goes into the place."""
    error = exc.errors(include_url=False)[0]
    # pydantic marks an error in a key of a map with an extra "[key]" step: the key is named.
    at = _place(model, [str(part) for part in error["loc"] if part != "[key]"])
    name = ".".join([*at.parents, at.name, *at.rest]) if dotted else at.name
    place = ": ".join([*([where] if where else []), *([] if dotted else at.parents)])
    prefix = f"{place}: " if place else ""
    kind = error["type"]
    if kind == "missing":
        return f"{prefix}the field {name!r} is missing"
    if kind == "extra_forbidden":
        listed = "" if at.rest else f" (known: {', '.join(at.known)})"
        return f"{prefix}unknown field {name!r}{listed}"
    if not name:  # the whole input: a validator of the model, or input that is no map
        ctx = error.get("ctx", {})
        return f"{prefix}{ctx['error'] if 'error' in ctx else error['msg']}"
    steps = f" at {name}[{']['.join(at.rest)}]" if at.rest and not dotted else ""
    got = f", got {error['input']!r}{steps}"
    if kind == "value_error":  # a field validator's ValueError says "must be ..."
        return f"{prefix}field {name!r} {error['ctx']['error']}{got}"
    return f"{prefix}field {name!r} must be {_must_be(error, at, dotted)}{got}"


def job_id(run: str, task: str, kind: JobKind, indices: Sequence[int], attempt: int) -> str:
    """The deterministic id of a job, ``run:task:<first index, merge or command>:attempt``:
    an id enqueued twice is one job."""
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
    """The dict that `serialize` wrote; `PayloadError` for anything else, a pickle (arq's
    default, an attacker's way to run code on a worker) refused by its header unread."""
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
