"""The routes of runs: submit, list, one run, its failures, replay and cancel.

A rejected document creates nothing and answers 422 with every problem; a replay or a
cancel that the run's state does not allow answers 409, an unknown run 404.
"""

from __future__ import annotations

import base64
import binascii
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from simrun.runstore import RunStateError, UnknownRunError
from simrun.service.api.deps import AUTH, ControllerDep, known_run
from simrun.workflow import Problem, WorkflowError, check_workflow, name_problem, parse_workflow

__all__ = ["MAX_UPLOAD_BYTES", "ReplayBody", "SourceUpload", "SubmitBody", "router"]

#: The largest source file accepted in one submission (decoded), bytes.
MAX_UPLOAD_BYTES = 512 * 2**20

router = APIRouter(dependencies=AUTH)
#: The dependencies of a route of one run: 404 when there is no such run.
ONE_RUN = [Depends(known_run)]


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


def _refused(exc: UnknownRunError | RunStateError) -> HTTPException:
    """404 for an unknown run, 409 for a run whose state does not allow what was asked."""
    status = 404 if isinstance(exc, UnknownRunError) else 409
    return HTTPException(status_code=status, detail=str(exc))


@router.post("/runs", status_code=201, response_model=None)
async def submit(body: SubmitBody, controller: ControllerDep) -> dict[str, Any] | JSONResponse:
    with tempfile.TemporaryDirectory(prefix="simrun-upload-") as tmp:
        try:
            doc = parse_workflow(body.workflow)
            settings = check_workflow(doc, controller.types, "workflow", body.workflow)
            uploaded = _write_uploads(body.sources, Path(tmp))
            run_id = await controller.submit(doc, settings, body.workflow, uploaded=uploaded)
        except WorkflowError as exc:
            return _problems(exc.problems)
    return {"run": run_id}


@router.get("/runs")
async def runs(controller: ControllerDep, limit: int = 50) -> list[dict[str, Any]]:
    rows = await controller.queries.runs(limit=max(1, min(limit, 1000)))
    return [{k: v for k, v in asdict(r).items() if k != "document"} for r in rows]


@router.get("/runs/{run_id}")
async def run(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    view = await controller.queries.run(run_id)
    if view is None:
        raise HTTPException(status_code=404, detail=f"there is no run {run_id!r}")
    return view.to_dict()


@router.get("/runs/{run_id}/failures", dependencies=ONE_RUN)
async def failures(run_id: str, controller: ControllerDep) -> list[dict[str, Any]]:
    return [asdict(f) for f in await controller.queries.failures(run_id)]


@router.post("/runs/{run_id}/replay", dependencies=ONE_RUN)
async def replay(run_id: str, body: ReplayBody, controller: ControllerDep) -> dict[str, Any]:
    try:
        count = await controller.replay(run_id, body.task, body.units, body.memory_gb)
    except (UnknownRunError, RunStateError) as exc:
        raise _refused(exc) from exc
    return {"run": run_id, "replayed": count}


@router.post("/runs/{run_id}/cancel", dependencies=ONE_RUN)
async def cancel(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    try:
        count = await controller.cancel(run_id)
    except (UnknownRunError, RunStateError) as exc:
        raise _refused(exc) from exc
    return {"run": run_id, "in_flight": count}
