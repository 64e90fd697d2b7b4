"""What the service tells of its health and load: ``GET /health`` (open: probes cannot
send a header), ``GET /backlog`` (`simrun scale`) and ``GET /metrics`` (Prometheus)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from simrun import __version__
from simrun.core.scaling import ContainerShape
from simrun.core.views import ErrorCode
from simrun.service import metrics
from simrun.service.routes.deps import ApiError, ControllerDep

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
