"""The routes of runs: submit, list, one run, its failures, replay and cancel. A rejected
document creates nothing (422, every problem); a replay or cancel the run's state does not
allow answers 409, an unknown run 404 (`deps`)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from simrun.core.views import ErrorCode
from simrun.service.routes.deps import ApiError, ControllerDep, known_run, unknown_run
from simrun.service.routes.submission import SubmitBody, receive_submission

router = APIRouter()
#: The dependencies of a route of one run: 404 when there is no such run.
ONE_RUN = [Depends(known_run)]


class ReplayBody(BaseModel):
    """Which failed units to replay: all of the run, of one task, or some indices; with
    ``all``, every unit of ``task`` (done ones too) and of the tasks reading it."""

    model_config = ConfigDict(extra="forbid")
    task: str | None = None
    units: list[int] = Field(default_factory=list)
    memory_gb: float | None = Field(default=None, gt=0, le=4096)
    all: bool = False


@router.post(
    "/runs",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": SubmitBody.model_json_schema()}},
        }
    },
)
async def submit(request: Request, controller: ControllerDep) -> dict[str, Any]:
    """Submit a workflow and its uploaded sources (`SubmitBody`). The body is read here
    (bounded by the guard) and parsed, checked and written out in a thread; a
    `WorkflowError` answers 422 with every problem."""
    raw = await request.body()
    tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="simrun-upload-"))
    try:
        received = await asyncio.to_thread(
            receive_submission, raw, controller.types, controller.settings.intake, tmp
        )
        del raw
        run_id = await controller.submit(
            received.doc,
            received.settings,
            received.text,
            uploaded=received.sources,
            reuse=received.reuse,
            rerun=received.rerun,
        )
    finally:
        await asyncio.to_thread(shutil.rmtree, tmp, True)
    return {"run": run_id}


@router.get("/runs")
async def runs(controller: ControllerDep, limit: int = 50) -> list[dict[str, Any]]:
    rows = await controller.queries.runs(limit=max(1, min(limit, 1000)))
    return [{k: v for k, v in asdict(r).items() if k != "document"} for r in rows]


@router.get("/runs/{run_id}")
async def run(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    view = await controller.queries.run(run_id)
    if view is None:
        raise unknown_run(run_id)
    return view.to_dict()


@router.get("/runs/{run_id}/failures", dependencies=ONE_RUN)
async def failures(run_id: str, controller: ControllerDep) -> list[dict[str, Any]]:
    return [asdict(f) for f in await controller.queries.failures(run_id)]


@router.post("/runs/{run_id}/replay", dependencies=ONE_RUN)
async def replay(run_id: str, body: ReplayBody, controller: ControllerDep) -> dict[str, Any]:
    if body.all and (body.task is None or body.units):
        detail = "'all' needs a 'task' and no 'units' (it reruns the task)"
        raise ApiError(ErrorCode.INVALID, detail)
    if body.all and body.task is not None:
        tasks, count = await controller.rerun(run_id, body.task, body.memory_gb)
        return {"run": run_id, "replayed": count, "tasks": tasks}
    count = await controller.replay(run_id, body.task, body.units, body.memory_gb)
    return {"run": run_id, "replayed": count}


@router.post("/runs/{run_id}/cancel", dependencies=ONE_RUN)
async def cancel(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    return {"run": run_id, "in_flight": await controller.cancel(run_id)}
