"""The routes of the kept logs of a run's units (`simrun.core.unitlogs`) in the shared
store: per task the last attempt of each unit, a unit's attempts, and what a unit printed
from given byte offsets on (``simrun logs --follow``). A task name that no task may have
(`simrun.core.layout.task_name_problem`: ``..``, ``/``, a NUL, ...) answers 422 naming the
field, on every route, before the store is looked at; anything unknown answers 404."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query

from simrun.core.layout import task_name_problem
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
    if task is not None:
        _task_name(task)
    found = await asyncio.to_thread(run_logs, controller.settings.store, run_id, task)
    return {"tasks": {name: [h.to_dict() for h in headers] for name, headers in found.items()}}


@router.get("/runs/{run_id}/logs/{task}/{unit}", dependencies=ONE_RUN)
async def unit_logs(
    run_id: str, task: str, unit: str, controller: ControllerDep, attempt: int | None = None
) -> dict[str, Any]:
    key = _unit_of(task, unit)
    found = await asyncio.to_thread(
        store_unit_logs, controller.settings.store, run_id, task, key, attempt
    )
    return found.to_dict()


def _task_name(task: str) -> None:
    """422 naming the field for a task name no task may have (it would name a path)."""
    if (why := task_name_problem(task)) is not None:
        raise ApiError(ErrorCode.INVALID, f"task: the task name {why}")


def _unit_of(task: str, unit: str) -> int | str:
    """The one check of a unit route's path: its task name (`_task_name`), and its unit
    (an index, or ``merge``/``command``; 404 naming a bad one)."""
    _task_name(task)
    try:
        return parse_unit(unit)
    except ValueError as exc:  # also int()'s own, of a digit that is not ASCII ("²")
        why = str(exc) if str(exc).startswith("unit ") else f"unit {unit[:40]!r} is no index"
        raise ApiError(ErrorCode.NOT_FOUND, why) from exc


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
    key = _unit_of(task, unit)
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


@router.get("/runs/{run_id}/logs/{rest:path}", include_in_schema=False)
async def no_log_route(run_id: str, rest: str) -> None:
    """A path under a run's logs that is no route: a task name with a '/' (``%2F`` is a
    separator once decoded), an empty task or unit, a segment too many."""
    shown = rest if len(rest) <= 80 else f"{rest[:80]}..."
    raise ApiError(
        ErrorCode.NOT_FOUND,
        f"no log route {shown!r} of run {run_id[:40]!r}: the path is "
        "/runs/RUN/logs/TASK/UNIT[/live], and a task name holds no '/' and is not empty",
    )
