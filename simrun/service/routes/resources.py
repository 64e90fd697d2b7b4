"""``GET /resources``: what is learned per resource key; ``GET /resources/{key}``: the
evidence behind one key's request."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from simrun.core.views import ErrorCode
from simrun.resources import ResourceKey
from simrun.resources.keys import unknown_key_message
from simrun.service.routes.deps import ApiError, ControllerDep

router = APIRouter()


@router.get("/resources")
async def resources(controller: ControllerDep) -> list[dict[str, Any]]:
    out = []
    for summary in await controller.queries.resources_by_key():
        row = asdict(summary)
        row["key"] = summary.key.text()
        out.append(row)
    return out


@router.get("/resources/{key:path}")
async def evidence(key: str, controller: ControllerDep) -> dict[str, Any]:
    """The evidence of one key (``task_type/model[/variant]``): its request and why, the
    peaks of its window and its latest kills. A key that does not parse or has no
    observations answers 404 naming it and the known keys close to it."""
    try:
        parsed: ResourceKey | None = ResourceKey.from_text(key)
    except ValueError:
        parsed = None
    if parsed is not None:
        found = await controller.queries.key_evidence(parsed)
        if found.observations:
            return found.to_dict()
    known = [k.text() for k in await controller.queries.resources.keys()]
    raise ApiError(ErrorCode.UNKNOWN_KEY, unknown_key_message(key, known))
