"""The routes of the logs of a run's units (`simrun.core.unitlogs`), read from the store
the service and its workers share:

- ``GET /runs/{run}/logs[?task=T]``: per task, the last attempt of each unit with a log
  (the units that did not end well first);
- ``GET /runs/{run}/logs/{task}/{unit}[?attempt=N]``: a unit's attempts, each with its
  header (worker, process, memory, times, outcome, traceback) and its output;
- ``GET /runs/{run}/logs/{task}/{unit}/live[?since=FILE:OFFSET ...]``: what each attempt
  of a unit printed so far, a running one's too, from the byte offsets given per output
  file on (`simrun.core.unitlogs.live_unit_logs`), and the header of each that ended:
  ``simrun logs --follow`` asks it again with the offsets it got.

An unknown run, task or unit, or an attempt without a log, answers 404 with one line.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query

from simrun.core.unitlogs import (
    LogNotFound,
    parse_unit,
    run_logs,
    store_live_unit_logs,
    store_unit_logs,
)
from simrun.service.api.deps import ControllerDep, known_run

router = APIRouter()
ONE_RUN = [Depends(known_run)]


@router.get("/runs/{run_id}/logs", dependencies=ONE_RUN)
async def logs(run_id: str, controller: ControllerDep, task: str | None = None) -> dict[str, Any]:
    try:
        found = await asyncio.to_thread(run_logs, controller.settings.store, run_id, task)
    except LogNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    return {"tasks": {name: [h.to_dict() for h in headers] for name, headers in found.items()}}


@router.get("/runs/{run_id}/logs/{task}/{unit}", dependencies=ONE_RUN)
async def unit_logs(
    run_id: str, task: str, unit: str, controller: ControllerDep, attempt: int | None = None
) -> dict[str, Any]:
    key = _unit_key(unit)
    try:
        found = await asyncio.to_thread(
            store_unit_logs, controller.settings.store, run_id, task, key, attempt
        )
    except LogNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    return found.to_dict()


def _unit_key(unit: str) -> int | str:
    """The unit of a path (an index, or ``merge``/``command``); 404 naming a bad one."""
    try:
        return parse_unit(unit)
    except ValueError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc


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
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    try:
        found = await asyncio.to_thread(
            store_live_unit_logs, controller.settings.store, run_id, task, key, offsets
        )
    except LogNotFound:
        found = []  # a known run (`known_run`) whose directory is not made yet
    return {"run": run_id, "task": task, "unit": key, "attempts": [a.to_dict() for a in found]}
