"""What the service tells of its health and load: ``GET /health`` (open: probes cannot
send a header), ``GET /backlog`` (`simrun scale`), ``GET /metrics`` (Prometheus), and
``GET /workers`` (the live workers, their clock skew, and per queue its backlog and what
scale would ask) with its events."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from redis.exceptions import RedisError

from simrun import __version__
from simrun.core.reports import WorkerInfo
from simrun.core.scaling import ContainerShape, QueueBacklog, desired_containers
from simrun.core.timing import clock_skew_warning
from simrun.core.views import ErrorCode
from simrun.service import metrics
from simrun.service.controller import Controller
from simrun.service.routes.deps import ApiError, ControllerDep
from simrun.service.routes.events import polled_events, streaming

#: /health: open (`simrun.service.routes.guard.OPEN_PATHS`).
health_router = APIRouter()
#: /backlog and /metrics: behind the token like every route but /health (the guard).
router = APIRouter()


def _default_shape(request: Request) -> ContainerShape:
    shape: ContainerShape = request.app.state.default_shape
    return shape


#: A health snapshot older than this (s) means the controller's loop is stuck.
STALE_HEALTH_S = 60.0


def health_document(controller: Controller) -> dict[str, Any]:
    """What ``GET /health`` answers, from the controller's memory alone (its loop's last
    `HealthSnapshot`, its link to Redis, its ``problems``): ``ok`` only when Redis answered,
    the loop stepped lately and no problem is set; ``status`` ok, degraded or starting."""
    now = controller.clock.monotonic()
    problems = dict(controller.problems)
    snapshot = controller.health
    down_s = controller.redis_down_s()
    age_s = None if snapshot is None else max(0.0, now - snapshot.at_s)
    if age_s is not None and age_s > STALE_HEALTH_S:
        problems.setdefault(
            "controller", f"the controller's loop has not stepped for {age_s:.0f} s"
        )
    if down_s is not None:  # degraded: reads answer from SQLite, nothing is dispatched
        redis, workers = f"unreachable for {down_s:.0f} s: {controller.link.reason}", 0
    elif snapshot is None:
        redis, workers = "not reached yet", 0
    else:
        redis, workers = "ok", snapshot.workers
    if down_s is not None or problems:
        status = "degraded"
    else:
        status = "starting" if snapshot is None else "ok"
    return {
        "ok": status == "ok",
        "status": status,
        "redis": redis,
        "workers": workers,
        "checked_s_ago": None if age_s is None else round(age_s, 3),
        "problems": problems,
        "version": __version__,
    }


@health_router.get("/health")
async def health(controller: ControllerDep) -> dict[str, Any]:
    """`health_document`, HTTP 200 whatever it says (as before: the Kubernetes probes pass
    while the service answers; who needs more reads ``ok`` and ``status``)."""
    return health_document(controller)


@router.get("/backlog")
async def backlog(request: Request, controller: ControllerDep) -> dict[str, Any]:
    found = await controller.queries.backlog()
    try:
        workers = await controller.queries.live_workers()
    except (RedisError, OSError) as exc:
        raise ApiError(ErrorCode.UNAVAILABLE, f"Redis unreachable: {exc}") from exc
    return metrics.backlog_document(
        found.queues, metrics.pools_of(workers), _default_shape(request)
    )


@router.get("/metrics")
async def prometheus_metrics(request: Request, controller: ControllerDep) -> Response:
    snapshot = await controller.queries.metrics(default_shape=_default_shape(request))
    return Response(content=metrics.render(snapshot), media_type=metrics.CONTENT_TYPE)


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
    return {"workers": [worker_entry(w) for w in live], "backlog": document}


def worker_entry(info: WorkerInfo) -> dict[str, Any]:
    """A worker of the workers document: its heartbeat, and what to say of its clock."""
    return {**json.loads(info.to_json()), "clock_warning": clock_skew_warning(info.clock_skew_s)}


@router.get("/workers")
async def workers(request: Request, controller: ControllerDep) -> dict[str, Any]:
    """The live workers and the queues (`workers_document`); 503 when Redis is away."""
    try:
        return await workers_document(controller, _default_shape(request))
    except (RedisError, OSError) as exc:
        raise ApiError(ErrorCode.UNAVAILABLE, f"Redis unreachable: {exc}") from exc


#: Seconds between two reads of the workers: heartbeats notify nothing, so their stream
#: reads on a timer (and on the controller's changes, which move the backlog).
WORKERS_POLL_S = 1.0


@router.get("/workers/events", response_model=None)
async def workers_stream(request: Request, controller: ControllerDep) -> StreamingResponse:
    """`workers_document` as events named ``workers``; while Redis is away, an event
    ``unavailable`` with the reason."""
    default = _default_shape(request)

    async def read() -> tuple[str, Any, bool]:
        try:
            return "workers", await workers_document(controller, default), True
        except (RedisError, OSError) as exc:
            return "unavailable", {"detail": f"Redis unreachable: {exc}"}, True

    return streaming(polled_events(controller, read, WORKERS_POLL_S, request))
