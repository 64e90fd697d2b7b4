"""The task name and unit of both unit-log routes (``/runs/R/logs/T/U`` and its ``/live``)
and the ``task`` of ``/runs/R/logs`` go through one check (`task_name_problem`, the rule of
what a task may be called; `parse_unit`): a name that would lead elsewhere in the store
(``..``, ``.``, ``/``, a NUL, empty) answers 422 INVALID naming the field ``task``, a unit
that is none answers 404 naming ``unit``, on every route alike, and nothing of the store
outside the run is read. Over the real app and controller (real Redis, real SQLite), the
requests as a server hands them (`tests.support.asgi`)."""

from __future__ import annotations

import json

import httpx
import pytest

from simrun.core.layout import StoreLayout
from simrun.core.views import ErrorCode
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.integration.test_api_logs import _run_with_logs
from tests.support.asgi import raw_get

pytestmark = pytest.mark.redis

#: Task names in a path, as on the wire, and what the answer's line says of each.
BAD_TASKS = {
    "..": "'..' contains '..'",
    "%2E%2E": "'..' contains '..'",
    ".": "'.' contains",
    "%2E": "'.' contains",
    "x%00": "contains a control character",
    "%00": "contains a control character",
    "%20": "is empty",
    "sweep.out": "contains '.'",
}
#: Task names with a '/' once decoded: no route, but a line that says why.
SLASHED = ["..%2Fsweep", "a%2Fb", "%2F", "..%2F..%2F.."]
#: Units that are none, and what the answer's line says.
BAD_UNITS = {
    "..": "unit '..' is not an index",
    "%2E": "unit '.' is not an index",
    "-1": "unit '-1' is not an index",
    "%00": "is not an index",
    "%C2%B2": "unit '²' is no index",
    "1" * 5000: "is no index",
}


def _routes(run_id: str, task: str, unit: str) -> list[str]:
    return [f"/runs/{run_id}/logs/{task}/{unit}", f"/runs/{run_id}/logs/{task}/{unit}/live"]


async def test_bad_task_names_and_units_are_refused_on_both_log_routes(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """Each name of `BAD_TASKS` answers 422 INVALID, its line naming ``task:`` and why, on
    both unit routes and as ``?task=`` of the run's logs; a task with a '/' (`SLASHED`)
    matches no route: 404 saying a task name holds none (422 as ``?task=``); each unit of
    `BAD_UNITS` answers 404 NOT_FOUND naming the unit on both; a good task and unit still
    answer 200; a file put where ``..`` would lead (the store's ``runs/logs``) is never
    served."""
    run_id = await _run_with_logs(api, controller)
    decoy = StoreLayout(controller.settings.store).runs / "logs" / "units"
    decoy.mkdir(parents=True)
    (decoy / "unit-3.attempt-1.log").write_text("not of this run\n")
    app = create_app(controller)
    for raw, says in BAD_TASKS.items():
        for path in [*_routes(run_id, raw, "3"), f"/runs/{run_id}/logs?task={raw}"]:
            status, body = await raw_get(app, path)
            answer = json.loads(body)
            assert (status, answer["code"]) == (422, ErrorCode.INVALID), (path, answer)
            assert answer["detail"].startswith("task: the task name "), (path, answer)
            assert says in answer["detail"], (path, answer)
            assert "not of this run" not in body.decode()
    for raw in SLASHED:
        for path in _routes(run_id, raw, "3"):
            status, body = await raw_get(app, path)
            answer = json.loads(body)
            assert (status, answer["code"]) == (404, ErrorCode.NOT_FOUND), (path, answer)
            assert "a task name holds no '/'" in answer["detail"], (path, answer)
        status, body = await raw_get(app, f"/runs/{run_id}/logs?task={raw}")
        assert status == 422, (raw, body)
        assert b"contains" in body, (raw, body)
    for raw, says in BAD_UNITS.items():
        for path in _routes(run_id, "sweep", raw):
            status, body = await raw_get(app, path)
            answer = json.loads(body)
            assert (status, answer["code"]) == (404, ErrorCode.NOT_FOUND), (path[:80], answer)
            assert says in answer["detail"], (path[:80], answer)
            assert len(answer["detail"]) < 200
    for path in _routes(run_id, "sweep", "3"):
        status, body = await raw_get(app, path)
        assert status == 200, (path, body)
        assert b"try 1" in body


async def test_an_empty_task_or_unit_in_the_path_matches_no_route(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """An empty path segment for the task or the unit is no log route (404 saying the
    path's form), and ``?task=`` empty is refused as an empty task name (422 naming
    ``task``)."""
    run_id = await _run_with_logs(api, controller)
    app = create_app(controller)
    for path in [*_routes(run_id, "", "3"), *_routes(run_id, "sweep", "")]:
        status, body = await raw_get(app, path)
        assert status == 404, (path, body)
        assert "/runs/RUN/logs/TASK/UNIT[/live]" in json.loads(body)["detail"], path
    status, body = await raw_get(app, f"/runs/{run_id}/logs?task=")
    answer = json.loads(body)
    assert (status, answer["detail"]) == (422, "task: the task name is empty")
