"""``GET /resources``: what is learned per resource key."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from simrun.service.api.deps import ControllerDep

__all__ = ["router"]

router = APIRouter()


@router.get("/resources")
async def resources(controller: ControllerDep) -> list[dict[str, Any]]:
    out = []
    for summary in await controller.queries.resources_by_key():
        row = asdict(summary)
        row["key"] = summary.key.text()
        out.append(row)
    return out
