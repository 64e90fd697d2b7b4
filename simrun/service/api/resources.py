"""``GET /resources``: what is learned per resource key; ``GET /resources/{key}``: the
evidence behind one key's request."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from simrun.resources import ResourceKey
from simrun.resources.keys import unknown_key_message
from simrun.service.api.deps import ControllerDep

#: The field of a 404 of ``GET /resources/{key}`` that tells an unknown key from an
#: unknown route (an older service): the client shows the detail as it is.
UNKNOWN_KEY = "unknown_key"

router = APIRouter()


@router.get("/resources")
async def resources(controller: ControllerDep) -> list[dict[str, Any]]:
    out = []
    for summary in await controller.queries.resources_by_key():
        row = asdict(summary)
        row["key"] = summary.key.text()
        out.append(row)
    return out


@router.get("/resources/{key:path}", response_model=None)
async def evidence(key: str, controller: ControllerDep) -> dict[str, Any] | JSONResponse:
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
    detail = unknown_key_message(key, known)
    return JSONResponse({"detail": detail, UNKNOWN_KEY: key}, status_code=404)
