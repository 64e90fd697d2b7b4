"""The routes of the web app's Editor: a run's workflow as submitted, the palette of
installed types with the package of each, and the check of a workflow (the messages of
``simrun validate`` with their task, field and line, and the forecast on the live pool)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from simrun.app.plans import task_plans
from simrun.app.prepare import TEXT_SOURCE, prepare_text
from simrun.core.forecast import forecast, forecast_document
from simrun.core.reuse import module_owners
from simrun.core.sizing import WorkerCapacity
from simrun.core.views import type_info
from simrun.plugins import TaskType
from simrun.service.controller import Controller
from simrun.service.routes.deps import ControllerDep, unknown_run
from simrun.workflow import WorkflowError

router = APIRouter()


@router.get("/runs/{run_id}/document")
async def document(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    """The workflow document of a run as it was submitted (the Editor opens it)."""
    row = await controller.queries.store.run(run_id)
    if row is None:
        raise unknown_run(run_id)
    return {"run": run_id, "workflow": row.document}


def package_of(task_type: TaskType, owners: Mapping[str, list[str]]) -> str:
    """The distribution that provides ``task_type`` (from the module of its settings
    model), or that module's top package when no distribution is known."""
    top = task_type.settings.__module__.split(".")[0]
    found = owners.get(top)
    return found[0] if found else top


@router.get("/dashboard/types")
async def palette(controller: ControllerDep) -> list[dict[str, Any]]:
    owners = await asyncio.to_thread(module_owners)
    return [
        {**type_info(t), "package": package_of(t, owners)}
        for t in sorted(controller.types.values(), key=lambda t: t.name)
    ]


class CheckBody(BaseModel):
    """A workflow from the Editor: its text, the sources it uploaded, and whether to
    forecast it."""

    model_config = ConfigDict(extra="forbid")
    workflow: str
    sources: list[str] = Field(default_factory=list)
    forecast: bool = False


@router.post("/dashboard/check")
async def check(body: CheckBody, controller: ControllerDep) -> dict[str, Any]:
    """The Editor's Validate and Forecast: ``ok`` with the tasks' settings (defaults
    filled in), or the problems; with ``forecast``, the forecast table too."""
    try:
        prepared = await asyncio.to_thread(
            prepare_text, body.workflow, TEXT_SOURCE, Path.cwd(), controller.types,
            uploaded=body.sources, limits=controller.settings.intake,
        )  # fmt: skip
        out: dict[str, Any] = {"ok": True, "errors": [], "settings": prepared.settings}
        if body.forecast:
            resolve = controller.queries.resources.resolve
            rows = await task_plans(prepared.doc, controller.types, resolve)
            pool = await _live_pool(controller)
            plans = [r.plan for r in rows if r.plan is not None]
            out["forecast"] = forecast_document(forecast(plans, pool), pool)
    except WorkflowError as exc:
        return {"ok": False, "errors": exc.as_dicts()}
    return out


async def _live_pool(controller: Controller) -> list[WorkerCapacity]:
    try:
        live = await controller.queries.live_workers()
    except (RedisError, OSError):
        live = []
    return [WorkerCapacity(w.id, tuple(w.queues), w.memory_gb, w.processes, w.gpus) for w in live]
