"""The HTTP API over a real controller (real Redis, real SQLite): routes, refusals, auth.

Requests go through httpx's ASGI transport to the real FastAPI app; no worker runs, so
these tests check what the API says, not that units compute (tests/e2e does that).
"""

from __future__ import annotations

import base64

import httpx
import pytest

from simrun.core.views import ErrorCode
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support import REPO

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()
PLATE = (REPO / "examples" / "plate.json").read_bytes()
TOKEN = "s3cret-token"


def upload(data: bytes, filename: str = "plate.json") -> dict[str, str]:
    return {"filename": filename, "content_b64": base64.b64encode(data).decode()}


async def test_submit_creates_a_run_with_its_uploaded_source(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """A valid submission answers 201 with a run id; the run is listed and its source is
    copied into the run's directory."""
    response = await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": upload(PLATE)}})
    assert response.status_code == 201, response.text
    run_id = response.json()["run"]
    listed = (await api.get("/runs")).json()
    assert [r["id"] for r in listed] == [run_id]
    assert "document" not in listed[0]
    view = (await api.get(f"/runs/{run_id}")).json()
    assert view["state"] == "running"
    assert [t["name"] for t in view["tasks"]] == ["sweep", "summary"]
    copies = list((controller.settings.store / "runs" / run_id).rglob("plate.json"))
    assert [c.read_bytes() for c in copies] == [PLATE]


async def test_a_rejected_document_creates_nothing(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """A document with problems answers 422 listing every problem with task, field and line,
    and creates no run and no directory."""
    bad = HEAT.replace("type: heat", "type: haet").replace("sweep.out", "sweeep.out")
    response = await api.post("/runs", json={"workflow": bad, "sources": {"plate": upload(PLATE)}})
    assert response.status_code == 422
    errors = response.json()["errors"]
    messages = " | ".join(e["message"] for e in errors)
    assert "unknown task type 'haet'; did you mean 'heat'?" in messages
    assert "unknown task 'sweeep'" in messages
    assert all(e["line"] for e in errors)
    assert {e["task"] for e in errors} == {"sweep", "summary"}
    assert (await api.get("/runs")).json() == []
    assert not (controller.settings.store / "runs").exists() or not any(
        (controller.settings.store / "runs").iterdir()
    )


async def test_a_missing_source_is_refused(api: httpx.AsyncClient) -> None:
    """A source that was not uploaded is named in a 422 (the service reads no path)."""
    response = await api.post("/runs", json={"workflow": HEAT})
    assert response.status_code == 422
    assert response.json()["errors"][0]["where"] == "sources.plate"
    assert "was not uploaded" in response.json()["errors"][0]["message"]


async def test_bad_uploads_are_refused(api: httpx.AsyncClient) -> None:
    """An upload that is not base64, or whose name is unsafe, is refused naming the source."""
    response = await api.post(
        "/runs", json={"workflow": HEAT, "sources": {"plate": {"content_b64": "***"}}}
    )
    assert response.status_code == 422
    by_where = {e["where"]: e["message"] for e in response.json()["errors"]}
    assert by_where["sources.plate"] == "source 'plate': content_b64 is not valid base64"
    response = await api.post(
        "/runs", json={"workflow": HEAT, "sources": {"plate": upload(PLATE), "../x": upload(b"")}}
    )
    assert response.status_code == 422
    by_where = {e["where"]: e["message"] for e in response.json()["errors"]}
    assert "contains '..'" in by_where["sources.../x"]


async def test_unknown_runs_are_404(api: httpx.AsyncClient) -> None:
    """Every per-run route answers 404 naming an unknown run."""
    for method, path in [
        ("GET", "/runs/nope"),
        ("GET", "/runs/nope/failures"),
        ("POST", "/runs/nope/replay"),
        ("POST", "/runs/nope/cancel"),
    ]:
        response = await api.request(method, path, json={} if method == "POST" else None)
        assert response.status_code == 404, (method, path)
        assert "there is no run 'nope'" in response.json()["detail"]


async def test_replay_without_failures_is_a_conflict(api: httpx.AsyncClient) -> None:
    """Replaying a run that has no failed units answers 409 with the reason."""
    run_id = (
        await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": upload(PLATE)}})
    ).json()["run"]
    response = await api.post(f"/runs/{run_id}/replay", json={})
    assert response.status_code == 409
    assert response.json()["detail"]


async def test_cancel_ends_the_run(api: httpx.AsyncClient) -> None:
    """A cancelled run is shown cancelled."""
    run_id = (
        await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": upload(PLATE)}})
    ).json()["run"]
    assert (await api.post(f"/runs/{run_id}/cancel")).status_code == 200
    assert (await api.get(f"/runs/{run_id}")).json()["state"] == "cancelled"


async def test_types_show_ports_hint_and_settings_schema(api: httpx.AsyncClient) -> None:
    """/types lists each installed type with its ports, hint and settings JSON schema."""
    types = {t["name"]: t for t in (await api.get("/types")).json()}
    heat = types["heat"]
    assert heat["inputs"] == ["plate"]
    assert heat["splittable"] is True
    assert heat["cost_setting"] == "grid"
    assert "grid" in heat["settings_schema"]["properties"]
    assert types["report"]["splittable"] is False


async def test_health_reports_redis_and_workers(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """/health says "starting" until the controller stepped, then that Redis answers, and
    counts live workers (none here)."""
    body = (await api.get("/health")).json()
    assert (body["ok"], body["status"]) == (False, "starting")
    await controller.step()
    body = (await api.get("/health")).json()
    assert (body["ok"], body["status"], body["redis"]) == (True, "ok", "ok")
    assert body["workers"] == 0


async def test_a_token_is_required_when_set(controller: Controller) -> None:
    """With a token, routes answer 401 (code unauthorized) without it or with a wrong one,
    and work with it; /health stays open for probes."""
    transport = httpx.ASGITransport(app=create_app(controller, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        refused = await client.get("/runs")
        assert refused.status_code == 401
        assert refused.json()["code"] == ErrorCode.UNAUTHORIZED
        wrong = {"Authorization": "Bearer nope"}
        assert (await client.get("/runs", headers=wrong)).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/runs", headers=right)).status_code == 200
        assert (await client.get("/health")).status_code == 200


async def test_replay_all_needs_a_task_and_a_task_that_ran(api: httpx.AsyncClient) -> None:
    """`all` without a task (or with units) answers 422; a task that has not run yet, 409
    naming it; nothing changes."""
    run_id = (
        await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": upload(PLATE)}})
    ).json()["run"]
    for body in ({"all": True}, {"all": True, "task": "sweep", "units": [1]}):
        response = await api.post(f"/runs/{run_id}/replay", json=body)
        assert response.status_code == 422, body
        assert "'all' needs a 'task'" in response.json()["detail"]
    response = await api.post(f"/runs/{run_id}/replay", json={"all": True, "task": "summary"})
    assert response.status_code == 409
    assert "task 'summary'" in response.json()["detail"]


async def test_every_error_answer_carries_its_code(api: httpx.AsyncClient) -> None:
    """Every refusal of the API is a code (`ErrorCode`: what a program acts on) and a detail
    (the line for a person): unknown runs, keys, routes and logs, a conflict, a bad field
    (its line names it), a refused workflow (its problems with it)."""
    run_id = (
        await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": upload(PLATE)}})
    ).json()["run"]
    cases = [
        ("GET", "/runs/nope", None, 404, ErrorCode.UNKNOWN_RUN),
        ("POST", "/runs/nope/cancel", None, 404, ErrorCode.UNKNOWN_RUN),
        ("POST", f"/runs/{run_id}/replay", {}, 409, ErrorCode.RUN_STATE),
        ("POST", f"/runs/{run_id}/replay", {"all": True}, 422, ErrorCode.INVALID),
        ("POST", f"/runs/{run_id}/replay", {"units": ["x"]}, 422, ErrorCode.INVALID),
        ("GET", f"/runs/{run_id}/logs?task=nope", None, 404, ErrorCode.NOT_FOUND),
        ("GET", f"/runs/{run_id}/logs/sweep/x1", None, 404, ErrorCode.NOT_FOUND),
        ("GET", "/resources/x/y", None, 404, ErrorCode.UNKNOWN_KEY),
        ("GET", "/no/such/route", None, 404, ErrorCode.NOT_FOUND),
        ("DELETE", "/runs", None, 405, ErrorCode.METHOD_NOT_ALLOWED),
        ("POST", "/runs", {"workflow": "tasks: 3"}, 422, ErrorCode.REJECTED),
    ]
    for method, path, body, status, code in cases:
        response = await api.request(method, path, json=body)
        answer = response.json()
        assert (response.status_code, answer["code"]) == (status, code), (method, path, answer)
        assert isinstance(answer["detail"], str), answer
        assert answer["detail"], answer
        assert ("errors" in answer) == (code is ErrorCode.REJECTED), answer
    response = await api.post(f"/runs/{run_id}/replay", json={"units": ["x"]})
    assert response.json()["detail"].startswith("body.units.0: ")


async def test_the_schema_gives_every_route_its_error_answer(api: httpx.AsyncClient) -> None:
    """/openapi.json says the error answers of every route (4XX, 5XX: an `ErrorView`) and
    lists every code."""
    schema = (await api.get("/openapi.json")).json()
    codes = schema["components"]["schemas"]["ErrorCode"]["enum"]
    assert sorted(codes) == sorted(c.value for c in ErrorCode)
    error = {"$ref": "#/components/schemas/ErrorView"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status in ("4XX", "5XX"):
                content = operation["responses"][status]["content"]["application/json"]
                assert content["schema"] == error, (method, path, status)
            assert "422" not in operation["responses"], (method, path)
