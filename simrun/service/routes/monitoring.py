"""What the service tells of its health and load: ``GET /health`` (open: probes cannot
send a header), ``GET /backlog`` (`simrun scale`), ``GET /metrics`` (Prometheus), and
``GET /workers`` (the live workers and, per queue, its backlog and what scale would ask)
with its events."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from redis.exceptions import RedisError

from simrun import __version__
from simrun.core.scaling import ContainerShape, QueueBacklog, desired_containers
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


@health_router.get("/health")
async def health(controller: ControllerDep) -> dict[str, Any]:
    down_s = controller.redis_down_s()
    if down_s is not None:  # degraded: reads answer from SQLite, nothing is dispatched
        return {
            "ok": False,
            "status": "degraded",
            "redis": f"unreachable for {down_s:.0f} s: {controller.link.reason}",
            "workers": 0,
            "version": __version__,
        }
    try:
        workers = await controller.queries.live_workers()
    except (RedisError, OSError) as exc:
        return {"ok": False, "redis": f"unreachable: {exc}", "workers": 0}
    return {"ok": True, "redis": "ok", "workers": len(workers), "version": __version__}


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
    return {"workers": [json.loads(w.to_json()) for w in live], "backlog": document}


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
