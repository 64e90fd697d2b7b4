"""The routes of the units' logs over a real controller (real Redis, real SQLite): what a
worker kept in the store is served, unknown runs, tasks and units answer 404 in one line,
and the token guards them like every other route."""

from __future__ import annotations

import json

import httpx
import pytest

from simrun.core.layout import StoreLayout, task_logs
from simrun.core.unitlogs import UnitLogHeader, UnitLogs, attempt_paths, write_atomic
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support import REPO

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()
TOKEN = "s3cret-token"


async def _run_with_logs(api: httpx.AsyncClient, controller: Controller) -> str:
    """A submitted heat run whose unit 3 of ``sweep`` failed twice, printing each time."""
    import base64

    plate = (REPO / "examples" / "plate.json").read_bytes()
    source = {"filename": "plate.json", "content_b64": base64.b64encode(plate).decode()}
    response = await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": source}})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run"]
    logs = task_logs(StoreLayout(controller.settings.store).task_dir(run_id, "sweep"))
    for attempt in (1, 2):
        header = UnitLogHeader(
            run=run_id, task="sweep", unit=3, attempt=attempt, job_id=f"j{attempt}",
            worker="w1", pid=1000 + attempt, outcome="failed",
            error=f"Traceback (most recent call last):\nValueError: boom {attempt}",
            seconds=None, peak_gb=0.1, limit_gb=0.5, started=10.0, finished=11.0,
            output_bytes=8,
        )  # fmt: skip
        json_path, log_path = attempt_paths(logs, 3, attempt)
        write_atomic(json_path, json.dumps(header.to_dict()).encode())
        write_atomic(log_path, f"try {attempt}\n".encode())
    return run_id


async def test_the_logs_a_worker_kept_are_served(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """GET /runs/R/logs lists the units with a log per task (their last attempt); GET
    /runs/R/logs/T/U gives every attempt with its header and output, ?attempt=N one."""
    run_id = await _run_with_logs(api, controller)
    listing = await api.get(f"/runs/{run_id}/logs")
    assert listing.status_code == 200, listing.text
    [last] = listing.json()["tasks"]["sweep"]
    assert (last["unit"], last["attempt"]) == (3, 2)
    unit = await api.get(f"/runs/{run_id}/logs/sweep/3")
    assert unit.status_code == 200, unit.text
    logs = UnitLogs.from_dict(unit.json(), "answer")
    assert [a.output for a in logs.attempts] == ["try 1\n", "try 2\n"]
    assert logs.attempts[1].header.error is not None
    assert "ValueError: boom 2" in logs.attempts[1].header.error
    one = (await api.get(f"/runs/{run_id}/logs/sweep/3?attempt=1")).json()
    assert [a["header"]["pid"] for a in one["attempts"]] == [1001]


async def test_unknown_run_task_unit_answer_404_in_one_line(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """An unknown run, task, unit (or a UNIT that is no unit) or attempt answers 404 with
    one line naming it."""
    run_id = await _run_with_logs(api, controller)
    cases = {
        "/runs/nope/logs": "there is no run 'nope'",
        f"/runs/{run_id}/logs?task=sweeep": "has no task 'sweeep'",
        f"/runs/{run_id}/logs/sweep/4": "unit 4 of task 'sweep'",
        f"/runs/{run_id}/logs/sweep/x": "unit 'x' is not an index",
        f"/runs/{run_id}/logs/sweep/3?attempt=5": "no log of attempt 5",
    }
    for path, says in cases.items():
        response = await api.get(path)
        assert response.status_code == 404, path
        detail = response.json()["detail"]
        assert says in detail, (path, detail)
        assert "\n" not in detail


async def test_the_logs_need_the_token(controller: Controller) -> None:
    """With a token, the logs routes answer 401 without it."""
    transport = httpx.ASGITransport(app=create_app(controller, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        assert (await client.get("/runs/r1/logs")).status_code == 401
        assert (await client.get("/runs/r1/logs/sweep/3")).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/runs/r1/logs", headers=right)).status_code == 404
