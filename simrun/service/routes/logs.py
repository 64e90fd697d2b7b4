"""The routes of the kept logs of a run's units (`simrun.core.unitlogs`) in the shared
store: per task the last attempt of each unit, a unit's attempts, and what a unit printed
from given byte offsets on (``simrun logs --follow``); anything unknown answers 404."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query

from simrun.core.unitlogs import (
    LogNotFound,
    parse_unit,
    run_logs,
    store_live_unit_logs,
    store_unit_logs,
)
from simrun.core.views import ErrorCode
from simrun.service.routes.deps import ONE_RUN, ApiError, ControllerDep

router = APIRouter()


@router.get("/runs/{run_id}/logs", dependencies=ONE_RUN)
async def logs(run_id: str, controller: ControllerDep, task: str | None = None) -> dict[str, Any]:
    found = await asyncio.to_thread(run_logs, controller.settings.store, run_id, task)
    return {"tasks": {name: [h.to_dict() for h in headers] for name, headers in found.items()}}


@router.get("/runs/{run_id}/logs/{task}/{unit}", dependencies=ONE_RUN)
async def unit_logs(
    run_id: str, task: str, unit: str, controller: ControllerDep, attempt: int | None = None
) -> dict[str, Any]:
    key = _unit_key(unit)
    found = await asyncio.to_thread(
        store_unit_logs, controller.settings.store, run_id, task, key, attempt
    )
    return found.to_dict()


def _unit_key(unit: str) -> int | str:
    """The unit of a path (an index, or ``merge``/``command``); 404 naming a bad one."""
    try:
        return parse_unit(unit)
    except ValueError as exc:
        raise ApiError(ErrorCode.NOT_FOUND, str(exc)) from exc


def parse_since(items: list[str]) -> dict[str, int]:
    """``FILE:OFFSET`` items as offsets by file name; ValueError naming a bad one."""
    since: dict[str, int] = {}
    for item in items:
        name, _, offset = item.rpartition(":")
        if not name or not offset.isdigit():
            raise ValueError(f"since={item!r} is not FILE:OFFSET (a byte offset >= 0)")
        since[name] = int(offset)
    return since


@router.get("/runs/{run_id}/logs/{task}/{unit}/live", dependencies=ONE_RUN)
async def live_unit_logs(
    run_id: str,
    task: str,
    unit: str,
    controller: ControllerDep,
    since: list[str] = Query(default=[]),  # noqa: B008  # FastAPI's way to repeat a parameter
) -> dict[str, Any]:
    key = _unit_key(unit)
    try:
        offsets = parse_since(since)
    except ValueError as exc:
        raise ApiError(ErrorCode.INVALID, str(exc)) from exc
    try:
        found = await asyncio.to_thread(
            store_live_unit_logs, controller.settings.store, run_id, task, key, offsets
        )
    except LogNotFound:
        found = []  # a known run (`known_run`) whose directory is not made yet
    return {"run": run_id, "task": task, "unit": key, "attempts": [a.to_dict() for a in found]}
