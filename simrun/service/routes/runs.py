"""The routes of runs: submit, list (and the web app's runs list and its events), one run,
a page of a task's units in one state, its failures, replay and cancel. A rejected
document creates nothing (422, every problem); a replay or cancel the run's state does not
allow answers 409, an unknown run 404 (`deps`)."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from simrun.core.states import UNIT_STATES
from simrun.core.views import ErrorCode
from simrun.runstore.reads import KILLED
from simrun.service.controller import Controller
from simrun.service.routes.deps import ONE_RUN, ApiError, ControllerDep, unknown_run
from simrun.service.routes.events import polled_events, streaming
from simrun.service.routes.submission import SubmitBody, receive_submission
from simrun.service.submit import new_upload_dir
from simrun.service.views import MAX_PAGE, keep_run, run_line, unit_line

router = APIRouter()


class ReplayBody(BaseModel):
    """Which failed units to replay: all of the run, of one task, or some indices; with
    ``all``, every unit of ``task`` (done ones too) and of the tasks reading it."""

    model_config = ConfigDict(extra="forbid")
    task: str | None = None
    units: list[int] = Field(default_factory=list)
    memory_gb: float | None = Field(default=None, gt=0, le=4096)
    all: bool = False


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model`` with its nested models written in place: a schema given
    to the OpenAPI document by hand keeps no ``$defs`` of its own there (a
    ``#/$defs/DirectoryFile`` would point at nothing). The models are not recursive."""
    schema = model.model_json_schema()
    defs: dict[str, Any] = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return inline({**defs[ref.removeprefix("#/$defs/")], **rest})
        return {key: inline(value) for key, value in node.items()}

    inlined: dict[str, Any] = inline(schema)
    return inlined


@router.post(
    "/runs",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(SubmitBody)}},
        }
    },
)
async def submit(request: Request, controller: ControllerDep) -> dict[str, Any]:
    """Submit a workflow and its uploaded sources (`SubmitBody`). The body is read here
    (bounded by the guard) and parsed, checked and written out in a thread; a
    `WorkflowError` answers 422 with every problem."""
    raw = await request.body()
    tmp = await asyncio.to_thread(new_upload_dir)
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


#: What a task's strip pages: a state, or the killed units.
STRIP_STATES = (*UNIT_STATES, KILLED)

#: Seconds between two reads of the runs list while nothing was notified (a submission
#: notifies its own run only, which the list's follower does not wait on).
LIST_POLL_S = 1.0


#: The lines of ended runs a follower of the list has read, by run id, with the run's
#: ``updated_s`` then (a replay changes it): an ended run's line does not change.
EndedLines = dict[str, tuple[float, dict[str, Any]]]


async def runs_lines(
    controller: Controller,
    state: str | None,
    text: str | None,
    limit: int,
    ended: EndedLines | None = None,
) -> list[dict[str, Any]]:
    """The runs list under a filter, the latest first. With ``ended`` (a follower's own),
    the lines of ended runs are read once and kept there."""
    now = time.time()
    out = []
    for row in await controller.queries.runs(limit=max(1, min(limit, 1000))):
        kept = ended.get(row.id) if ended is not None else None
        if kept is not None and kept[0] == row.updated_s:
            line = kept[1]
        else:
            view = await controller.queries.run(row.id)
            if view is None:
                continue
            line = run_line(view, now)
            if ended is not None and row.state != "running":
                ended[row.id] = (row.updated_s, line)
        if keep_run(line, state, text):
            out.append(line)
    return out


@router.get("/dashboard/runs")
async def dashboard_runs(
    controller: ControllerDep, state: str | None = None, q: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    return await runs_lines(controller, state, q, limit)


@router.get("/dashboard/runs/events", response_model=None)
async def dashboard_run_events(
    request: Request,
    controller: ControllerDep,
    state: str | None = None,
    q: str | None = None,
    limit: int = 50,
) -> StreamingResponse:
    ended: EndedLines = {}

    async def read() -> tuple[str, Any, bool]:
        return "runs", await runs_lines(controller, state, q, limit, ended), True

    return streaming(polled_events(controller, read, LIST_POLL_S, request))


@router.get("/runs/{run_id}/units", dependencies=ONE_RUN)
async def units(
    run_id: str,
    controller: ControllerDep,
    task: str,
    state: str,
    offset: int = 0,
    limit: int = 100,
) -> dict[str, Any]:
    """A page of ``task``'s units in ``state`` (by index), or of its units killed for
    memory (``killed``), with their total."""
    if state not in STRIP_STATES:
        raise ApiError(ErrorCode.INVALID, f"state {state!r} is none of {', '.join(STRIP_STATES)}")
    known = {t.name for t in await controller.queries.store.tasks(run_id)}
    if task not in known:
        raise ApiError(ErrorCode.NOT_FOUND, f"run {run_id!r} has no task {task!r}")
    offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
    total, page = await controller.queries.store.unit_page(run_id, task, state, offset, limit)
    return {
        "run": run_id,
        "task": task,
        "state": state,
        "total": total,
        "offset": offset,
        "units": [unit_line(u) for u in page],
    }
