"""The routes the web app's pages need beyond the others (`simrun.service.web` serves the
page itself):

    GET  /dashboard/runs[?state=S&q=TEXT&limit=N]   the runs list: per run its state,
                                                     units done of all, failed, killed,
                                                     start, running time and ETA
    GET  /dashboard/runs/events[?state=S&q=TEXT]     the same list as server-sent events
                                                     (event ``runs``), sent when it changed
    GET  /runs/{id}/units?task=T&state=S&offset=O&limit=N
                                                     a page of a task's units in one state
                                                     (or ``killed``: killed for memory)
                                                     (the strip of the run page: no unit
                                                     is sent before a strip is opened)
    GET  /runs/{id}/document                         the run's workflow as submitted (the
                                                     Editor opens it)
    GET  /workers                                    the live worker containers and, per
                                                     queue, the backlog and what
                                                     ``simrun scale`` would ask for
    GET  /workers/events                             the same as server-sent events
                                                     (event ``workers``) when it changed
    GET  /dashboard/types                            the installed types (as ``/types``)
                                                     with the package providing each
    POST /dashboard/check                            {"workflow": text, "sources": [names],
                                                     "forecast": bool}: the messages of
                                                     ``simrun validate`` with their task,
                                                     field and line, and the forecast on
                                                     the live pool

All behind the token, like every route but /health (`simrun.service.routes.guard`). The
decisions (a run's line, the filter, a page, the forecast) are pure:
`simrun.service.dashboard`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from simrun.client import plan_tasks
from simrun.core.intake import InputLimits, tasks_problem
from simrun.core.reuse import module_owners
from simrun.core.scaling import ContainerShape, QueueBacklog, desired_containers
from simrun.core.sizing import WorkerCapacity, queue_name
from simrun.core.states import UNIT_STATES
from simrun.core.views import type_info
from simrun.plugins import TaskType, count_units
from simrun.resources import resource_key
from simrun.runstore.reads import KILLED
from simrun.service import metrics
from simrun.service.controller import Controller
from simrun.service.dashboard import (
    MAX_PAGE,
    PlanRow,
    forecast_rows,
    keep_run,
    run_line,
    unit_line,
)
from simrun.service.routes.deps import ControllerDep, known_run
from simrun.service.routes.events import EVENT_STREAM, KEEPALIVE_S, event
from simrun.workflow import (
    Problem,
    Workflow,
    WorkflowError,
    check_workflow,
    not_uploaded,
    parse_workflow_lines,
)

router = APIRouter()

#: What a task's strip pages: a state, or the killed units.
STRIP_STATES = (*UNIT_STATES, KILLED)

#: Seconds between two reads of the runs list while nothing was notified (a submission
#: notifies its own run only, which the list's follower does not wait on).
LIST_POLL_S = 1.0
#: Seconds after a wake-up before the list is read again: a busy controller notifies every
#: step, and the list reads every listed run (at most ~1/LIST_MIN_GAP_S reads a second).
LIST_MIN_GAP_S = 0.25


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


async def list_events(
    controller: Controller,
    state: str | None,
    text: str | None,
    limit: int,
    disconnected: Request | None = None,
) -> AsyncIterator[bytes]:
    """The runs list as events: at once, then each time it changed; a keep-alive comment
    after `KEEPALIVE_S` without one; ends when the service stops or the client left."""
    changes = controller.changes
    sent: str | None = None
    ended: EndedLines = {}
    quiet_since = time.monotonic()
    while not changes.closed:
        version = changes.version("")  # grows with every step that changed something
        lines = await runs_lines(controller, state, text, limit, ended)
        data = json.dumps(lines, separators=(",", ":"))
        if data != sent:
            yield event("runs", data)
            sent, quiet_since = data, time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield b": keep-alive\n\n"
            quiet_since = time.monotonic()
        if disconnected is not None and await disconnected.is_disconnected():
            return
        if await changes.wait("", version, LIST_POLL_S) > version:
            await asyncio.sleep(LIST_MIN_GAP_S)  # a burst of steps is read once


@router.get("/dashboard/runs/events", response_model=None)
async def dashboard_run_events(
    request: Request,
    controller: ControllerDep,
    state: str | None = None,
    q: str | None = None,
    limit: int = 50,
) -> StreamingResponse:
    return StreamingResponse(
        list_events(controller, state, q, limit, request),
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get("/runs/{run_id}/units", dependencies=[Depends(known_run)])
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
        raise HTTPException(
            status_code=422, detail=f"state {state!r} is none of {', '.join(STRIP_STATES)}"
        )
    known = {t.name for t in await controller.queries.store.tasks(run_id)}
    if task not in known:
        raise HTTPException(status_code=404, detail=f"run {run_id!r} has no task {task!r}")
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


async def workers_document(controller: Controller, default: ContainerShape) -> dict[str, Any]:
    """The live workers (their heartbeats) and the backlog per queue with what scale
    would ask for (the document of ``GET /backlog`` and, per queue, ``scale``); raises
    when Redis does not answer."""
    live = await controller.queries.live_workers()
    found = await controller.queries.backlog()
    pools = metrics.pools_of(live)
    document = metrics.backlog_document(found.queues, pools, default)
    for entry in document["queues"]:
        name = str(entry["queue"])
        shape = entry["shape"]
        using = ContainerShape(**shape) if shape else default
        decision = desired_containers(found.queues.get(name, QueueBacklog(name, ())), using)
        entry["scale"] = {
            "desired": decision.desired,
            "reason": decision.reason,
            "work_s": decision.work_s,
        }
    return {"workers": [json.loads(w.to_json()) for w in live], "backlog": document}


@router.get("/runs/{run_id}/document", dependencies=[Depends(known_run)])
async def document(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    """The workflow document of a run as it was submitted (the Editor opens it)."""
    row = await controller.queries.store.run(run_id)
    if row is None:
        raise HTTPException(status_code=404, detail=f"there is no run {run_id!r}")
    return {"run": run_id, "workflow": row.document}


@router.get("/workers")
async def workers(request: Request, controller: ControllerDep) -> dict[str, Any]:
    """The live workers and the queues (`workers_document`); 503 when Redis is away."""
    try:
        return await workers_document(controller, request.app.state.default_shape)
    except (RedisError, OSError) as exc:
        raise HTTPException(status_code=503, detail=f"Redis unreachable: {exc}") from exc


#: Seconds between two reads of the workers: heartbeats notify nothing, so their stream
#: reads on a timer (and on the controller's changes, which move the backlog).
WORKERS_POLL_S = 1.0


async def workers_events(
    controller: Controller, default: ContainerShape, disconnected: Request | None = None
) -> AsyncIterator[bytes]:
    """`workers_document` as events named ``workers``: at once, then each time it changed
    (read every `WORKERS_POLL_S` and on the controller's changes); while Redis is away, an
    event ``unavailable`` with the reason. Ends when the service stops or the client left."""
    changes = controller.changes
    sent: str | None = None
    quiet_since = time.monotonic()
    while not changes.closed:
        version = changes.version("")
        try:
            name, data = "workers", await workers_document(controller, default)
        except (RedisError, OSError) as exc:
            name, data = "unavailable", {"detail": f"Redis unreachable: {exc}"}
        text = json.dumps(data, separators=(",", ":"))
        if text != sent:
            yield event(name, text)
            sent, quiet_since = text, time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield b": keep-alive\n\n"
            quiet_since = time.monotonic()
        if disconnected is not None and await disconnected.is_disconnected():
            return
        if await changes.wait("", version, WORKERS_POLL_S) > version:
            await asyncio.sleep(LIST_MIN_GAP_S)


@router.get("/workers/events", response_model=None)
async def workers_stream(request: Request, controller: ControllerDep) -> StreamingResponse:
    return StreamingResponse(
        workers_events(controller, request.app.state.default_shape, request),
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


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
