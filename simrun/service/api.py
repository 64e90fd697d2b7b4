"""The HTTP API of the service (FastAPI), over one `Controller`.

Routes (JSON in and out; a bearer token is required when the service has one):

    GET  /health                      liveness, Redis reachability, live workers
    GET  /types                       installed task types (ports, hint, settings schema)
    POST /runs                        submit {"workflow": text, "sources": {name: upload}}
    GET  /runs                        the latest runs
    GET  /runs/{id}                   one run: per task its units by state, ETA, start
                                      and end, kills for memory, memory per process
                                      requested and at its peak
    GET  /runs/{id}/failures          failed units with their tracebacks
    POST /runs/{id}/replay            {"task"?, "units"?, "memory_gb"?}
    POST /runs/{id}/cancel
    GET  /resources                   what is learned per resource key
    GET  /backlog                     per queue: the units not done by resource key, and
                                      the live workers' count and shape (`simrun scale`)
    GET  /metrics                     Prometheus text format 0.0.4 (`simrun.service.metrics`)

A rejected document creates nothing and answers 422 with every problem.

/metrics stays behind the token when the service has one, like every route but /health:
it tells the queues, image names and load of the installation, and /health is open only
because probes cannot send a header. Prometheus sends the token itself; in the scrape job::

    - job_name: simrun
      authorization:
        type: Bearer
        credentials_file: /etc/prometheus/simrun-token   # the value of SIMRUN_TOKEN
      static_configs:
        - targets: ["simrun-service:8765"]

(``bearer_token_file:`` in Prometheus before 2.26). A Prometheus that finds its targets
from pod annotations needs such a job too, with its ``kubernetes_sd_configs``; KEDA asks
Prometheus, not the service, and needs nothing more.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from simrun import __version__
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.plugins import TaskType
from simrun.runstore import ReplayError
from simrun.service import metrics, metrics_gather
from simrun.service.controller import Controller
from simrun.workflow import Problem, WorkflowError, check_workflow, name_problem, parse_workflow

__all__ = ["MAX_UPLOAD_BYTES", "create_app", "type_info"]

log = logging.getLogger("simrun.service")

#: The largest source file accepted in one submission (decoded), bytes.
MAX_UPLOAD_BYTES = 512 * 2**20


class SourceUpload(BaseModel):
    """A source file sent with a submission, base64-encoded."""

    model_config = ConfigDict(extra="forbid")
    filename: str = ""
    content_b64: str


class SubmitBody(BaseModel):
    """A submission: the workflow document as written, and its source files."""

    model_config = ConfigDict(extra="forbid")
    workflow: str
    sources: dict[str, SourceUpload] = Field(default_factory=dict)


class ReplayBody(BaseModel):
    """Which failed units to replay: all of the run, of one task, or some indices."""

    model_config = ConfigDict(extra="forbid")
    task: str | None = None
    units: list[int] = Field(default_factory=list)
    memory_gb: float | None = Field(default=None, gt=0, le=4096)


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


def _problems(problems: list[Problem]) -> JSONResponse:
    return JSONResponse(status_code=422, content={"errors": WorkflowError(problems).as_dicts()})


def _write_uploads(sources: dict[str, SourceUpload], directory: Path) -> dict[str, Path]:
    """Decode the uploaded sources into ``directory``; `WorkflowError` names a bad one."""
    problems: list[Problem] = []
    written: dict[str, Path] = {}
    for name, upload in sources.items():
        if (why := name_problem(name)) is not None:
            problems.append(Problem(("sources", name), f"source name {why}"))
            continue
        try:
            data = base64.b64decode(upload.content_b64, validate=True)
        except (binascii.Error, ValueError):
            problems.append(Problem(("sources", name), "content_b64 is not valid base64"))
            continue
        if len(data) > MAX_UPLOAD_BYTES:
            problems.append(
                Problem(("sources", name), f"larger than {MAX_UPLOAD_BYTES // 2**20} MiB")
            )
            continue
        filename = Path(upload.filename).name or name
        target = directory / name / filename
        target.parent.mkdir(parents=True)
        target.write_bytes(data)
        written[name] = target
    if problems:
        raise WorkflowError(problems, "sources")
    return written


def create_app(
    controller: Controller,
    token: str | None = None,
    *,
    default_shape: ContainerShape = DEFAULT_SHAPE,
) -> FastAPI:
    """The API over ``controller``; with ``token``, every route but /health needs
    ``Authorization: Bearer <token>``. ``default_shape`` is the worker container /metrics
    decides the desired workers of a queue with while none of its workers is live."""

    async def authorized(request: Request) -> None:
        if token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
            raise HTTPException(
                status_code=401,
                detail="missing or wrong bearer token (set SIMRUN_TOKEN)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    app = FastAPI(title="simrun", version=__version__)
    auth = [Depends(authorized)]

    async def known_run(run_id: str) -> None:
        if await controller.store.run(run_id) is None:
            raise HTTPException(status_code=404, detail=f"there is no run {run_id!r}")

    one_run = [*auth, Depends(known_run)]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        try:
            workers = await controller.queue.live_workers()
        except (RedisError, OSError) as exc:
            return {"ok": False, "redis": f"unreachable: {exc}", "workers": 0}
        return {
            "ok": True,
            "redis": "ok",
            "workers": len(workers),
            "version": __version__,
        }

    @app.get("/types", dependencies=auth)
    async def types() -> list[dict[str, Any]]:
        return [type_info(t) for t in sorted(controller.types.values(), key=lambda t: t.name)]

    @app.post("/runs", dependencies=auth, status_code=201, response_model=None)
    async def submit(body: SubmitBody) -> dict[str, Any] | JSONResponse:
        with tempfile.TemporaryDirectory(prefix="simrun-upload-") as tmp:
            try:
                doc = parse_workflow(body.workflow)
                settings = check_workflow(doc, controller.types, "workflow", body.workflow)
                uploaded = _write_uploads(body.sources, Path(tmp))
                run_id = await controller.submit(doc, settings, body.workflow, uploaded=uploaded)
            except WorkflowError as exc:
                return _problems(exc.problems)
        return {"run": run_id}

    @app.get("/runs", dependencies=auth)
    async def runs(limit: int = 50) -> list[dict[str, Any]]:
        rows = await controller.runs(limit=max(1, min(limit, 1000)))
        return [{k: v for k, v in asdict(r).items() if k != "document"} for r in rows]

    @app.get("/runs/{run_id}", dependencies=auth)
    async def run(run_id: str) -> dict[str, Any]:
        view = await controller.run(run_id)
        if view is None:
            raise HTTPException(status_code=404, detail=f"there is no run {run_id!r}")
        return view.to_dict()

    @app.get("/runs/{run_id}/failures", dependencies=one_run)
    async def failures(run_id: str) -> list[dict[str, Any]]:
        return [asdict(f) for f in await controller.failures(run_id)]

    @app.post("/runs/{run_id}/replay", dependencies=one_run)
    async def replay(run_id: str, body: ReplayBody) -> dict[str, Any]:
        try:
            count = await controller.replay(run_id, body.task, body.units, body.memory_gb)
        except ReplayError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc
        return {"run": run_id, "replayed": count}

    @app.post("/runs/{run_id}/cancel", dependencies=one_run)
    async def cancel(run_id: str) -> dict[str, Any]:
        try:
            count = await controller.cancel(run_id)
        except ReplayError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc
        return {"run": run_id, "in_flight": count}

    @app.get("/resources", dependencies=auth)
    async def resources() -> list[dict[str, Any]]:
        out = []
        for summary in await controller.resources_by_key():
            row = asdict(summary)
            row["key"] = summary.key.text()
            out.append(row)
        return out

    @app.get("/backlog", dependencies=auth)
    async def backlog() -> dict[str, Any]:
        backlogs, _units, _running = await metrics_gather.gather_backlog(controller)
        try:
            workers = await controller.queue.live_workers()
        except (RedisError, OSError) as exc:
            raise HTTPException(status_code=503, detail=f"Redis unreachable: {exc}") from exc
        return metrics.backlog_document(backlogs, metrics.pools_of(workers), default_shape)

    @app.get("/metrics", dependencies=auth)
    async def prometheus_metrics() -> Response:
        snapshot = await metrics_gather.gather(controller, default_shape=default_shape)
        return Response(content=metrics.render(snapshot), media_type=metrics.CONTENT_TYPE)

    return app
