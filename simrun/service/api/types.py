"""``GET /types``: the installed task types."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from simrun.plugins import TaskType
from simrun.service.api.deps import ControllerDep

__all__ = ["router", "type_info"]

router = APIRouter()


def type_info(task_type: TaskType) -> dict[str, Any]:
    """What a client needs to know of a task type (the Editor's palette, `simrun types`)."""
    return {
        "name": task_type.name,
        "description": task_type.description,
        "inputs": list(task_type.inputs),
        "outputs": list(task_type.outputs),
        "splittable": task_type.splittable,
        "hint": asdict(task_type.hint),
        "cost_setting": task_type.cost_setting,
        "image": task_type.image,
        "settings_schema": task_type.settings.model_json_schema(),
    }


@router.get("/types")
async def types(controller: ControllerDep) -> list[dict[str, Any]]:
    return [type_info(t) for t in sorted(controller.types.values(), key=lambda t: t.name)]
