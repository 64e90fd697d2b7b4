"""The routes of the web app's Editor: a run's workflow as submitted, the palette of
installed types with the package of each, and the check of a workflow (the messages of
``simrun validate`` with their task, field and line, and the forecast on the live pool)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from simrun.client import plan_tasks
from simrun.core.intake import InputLimits, tasks_problem
from simrun.core.reuse import module_owners
from simrun.core.sizing import WorkerCapacity, queue_name
from simrun.core.views import type_info
from simrun.plugins import TaskType, count_units
from simrun.resources import resource_key
from simrun.service.controller import Controller
from simrun.service.dashboard import PlanRow, forecast_rows
from simrun.service.routes.deps import ControllerDep, unknown_run
from simrun.workflow import (
    Problem,
    Workflow,
    WorkflowError,
    check_workflow,
    not_uploaded,
    parse_workflow_lines,
)

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


def check_text(
    text: str, types: Mapping[str, TaskType], uploaded: list[str], limits: InputLimits
) -> tuple[Workflow, dict[str, dict[str, Any]]]:
    """``simrun validate``'s checks of ``text`` (the types' plans included) within the
    service's limits of a submission: the planned document and its settings;
    `WorkflowError` with every problem. Blocking (plugin code): run in a thread."""
    doc, lines = parse_workflow_lines(text, "workflow")
    too_many = tasks_problem(len(doc.tasks), limits)
    if too_many is not None:
        raise WorkflowError([Problem(("tasks",), too_many)], "workflow")
    check_workflow(doc, types, "workflow", lines=lines)
    planned = plan_tasks(doc, types)
    settings = check_workflow(planned, types, "workflow")
    missing = not_uploaded(doc, uploaded)
    if missing:
        raise WorkflowError(missing, "workflow")
    return planned, settings


def _count(task_type: TaskType, settings: Mapping[str, Any]) -> int:
    return count_units(task_type, settings) if task_type.splittable else 1


async def plan_rows(
    controller: Controller, doc: Workflow, settings: Mapping[str, dict[str, Any]]
) -> list[PlanRow]:
    """Each task of ``doc`` in the order it runs, with its units (counted in a thread) and
    the resources the service would resolve for it now."""
    rows = []
    deps = doc.dependencies()
    for name in doc.order():
        spec = doc.task(name)
        task_type = controller.types[spec.type]
        count = await asyncio.to_thread(_count, task_type, settings[name])
        key = resource_key(task_type, settings[name], doc.model)
        resolved = await controller.queries.resources.resolve(key, task_type.hint, spec.resources)
        rows.append(
            PlanRow(
                name=name,
                type=spec.type,
                splittable=task_type.splittable,
                units=count,
                queue=queue_name(doc.in_run_image(task_type).image, resolved.gpus),
                memory_per_worker_gb=resolved.memory_per_worker_gb,
                memory_base_gb=resolved.memory_base_gb,
                gpus=resolved.gpus,
                seconds_per_unit=resolved.seconds_per_unit,
                source=resolved.source,
                depends=tuple(sorted(deps[name])),
                uses_cores=task_type.uses_cores,
            )
        )
    return rows


@router.post("/dashboard/check")
async def check(body: CheckBody, controller: ControllerDep) -> dict[str, Any]:
    """The Editor's Validate and Forecast: ``ok`` with the tasks' settings (defaults
    filled in), or the problems; with ``forecast``, the forecast table too."""
    try:
        doc, settings = await asyncio.to_thread(
            check_text, body.workflow, controller.types, body.sources, controller.settings.intake
        )
    except WorkflowError as exc:
        return {"ok": False, "errors": exc.as_dicts()}
    out: dict[str, Any] = {"ok": True, "errors": [], "settings": settings}
    if body.forecast:
        try:
            rows = await plan_rows(controller, doc, settings)
        except WorkflowError as exc:
            return {"ok": False, "errors": exc.as_dicts()}
        except Exception as exc:  # noqa: BLE001  # plugin code (count_units) may raise anything
            return {
                "ok": False,
                "errors": [
                    {"loc": ["tasks"], "task": None, "where": "tasks", "line": None,
                     "message": f"count_units failed: {type(exc).__name__}: {exc}"}
                ],
            }  # fmt: skip
        try:
            live = await controller.queries.live_workers()
        except (RedisError, OSError):
            live = []
        pool = [
            WorkerCapacity(w.id, tuple(w.queues), w.memory_gb, w.processes, w.gpus) for w in live
        ]
        out["forecast"] = forecast_rows(rows, pool)
    return out
