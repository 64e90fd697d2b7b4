"""``GET /types``: the installed task types."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from simrun.core.views import type_info
from simrun.service.routes.deps import ControllerDep

router = APIRouter()


@router.get("/types")
async def types(controller: ControllerDep) -> list[dict[str, Any]]:
    return [type_info(t) for t in sorted(controller.types.values(), key=lambda t: t.name)]
