"""The web app's side of the service over a real controller (real Redis, real SQLite):
the page and its files open without the token, the data routes behind it, the runs list
with its filters, a page of a task's units by state, the workers, the palette with the
package of each type, and the Editor's check (the messages of ``simrun validate`` with
their task and field, and the forecast)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from simrun.service import web
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.integration.test_api_events import TOKEN as EVENTS_TOKEN
from tests.integration.test_api_events import serving
from tests.support.service_harness import submit, work_doc
from tests.support.wait import until

pytestmark = pytest.mark.redis

TOKEN = "page-token"


@pytest.fixture
async def guarded(controller: Controller) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app with a token, sending none."""
    transport = httpx.ASGITransport(app=create_app(controller, TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        yield client


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_the_page_loads_without_the_token_and_the_data_needs_it(
    guarded: httpx.AsyncClient,
) -> None:
    """``/`` and ``/assets/...`` answer without the token (they hold no data); every data
    route of the page answers 401 without it and 200 with it."""
    page = await guarded.get("/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "<script" in page.text
    assets = sorted((web.STATIC / "assets").iterdir())
    assert assets, "the bundle is built into simrun/service/static"
    one = await guarded.get(f"/assets/{assets[0].name}")
    assert one.status_code == 200
    assert (await guarded.get("/assets/..%2Fweb.py")).status_code == 404  # not out of assets
    for path in ("/dashboard/runs", "/dashboard/types", "/workers"):
        assert (await guarded.get(path)).status_code == 401, path
        assert (await guarded.get(path, headers=AUTH)).status_code == 200, path
    check = await guarded.post("/dashboard/check", json={"workflow": "tasks: []"})
    assert check.status_code == 401


async def test_the_page_bundle_uses_no_remote_asset() -> None:
    """The built page loads nothing from another host: no ``http(s)://`` in the document's
    ``src``/``href`` attributes (the page works without network)."""
    index = (web.STATIC / "index.html").read_text()
    assert 'src="http' not in index
    assert 'href="http' not in index
    assert "//cdn" not in index


async def test_the_runs_list_filters_by_state_and_text(
    controller: Controller, api: httpx.AsyncClient
) -> None:
    """Each run's line counts its units; a state filter keeps the runs in that state and a
    text filter the runs whose name holds it (case ignored)."""
    first = await submit(controller, work_doc("alpha-sweep", units=4))
    second = await submit(controller, work_doc("beta", units=3))
    await controller.cancel(second)
    lines = (await api.get("/dashboard/runs")).json()
    assert {line["id"] for line in lines} == {first, second}
    by_state = (await api.get("/dashboard/runs", params={"state": "cancelled"})).json()
    assert [line["id"] for line in by_state] == [second]
    by_text = (await api.get("/dashboard/runs", params={"q": "ALPHA"})).json()
    assert [line["id"] for line in by_text] == [first]
    assert by_text[0]["tasks"] == 1


async def test_the_runs_list_stream_sends_the_list_and_its_changes(
    controller: Controller,
) -> None:
    """The list's event stream (over a real HTTP server) sends the list at once and again
    after a new run."""
    first = await submit(controller, work_doc("one", units=2))
    events: list[list[dict[str, object]]] = []

    async def follow(url: str) -> None:
        headers = {"Authorization": f"Bearer {EVENTS_TOKEN}"}
        async with (
            httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client,
            client.stream("GET", "/dashboard/runs/events") as answer,
        ):
            assert answer.headers["content-type"].startswith("text/event-stream")
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if len(events) == 2:
                        return

    async with serving(controller) as url:
        task = asyncio.ensure_future(follow(url))
        await until(lambda: events, timeout_s=5, what="the list's first event", poll_s=0.02)
        assert [line["id"] for line in events[0]] == [first]
        second = await submit(controller, work_doc("two", units=2))
        await asyncio.wait_for(task, 10)
    assert {line["id"] for line in events[1]} == {first, second}


async def test_a_task_s_units_come_in_pages_of_one_state(
    controller: Controller, api: httpx.AsyncClient
) -> None:
    """``/runs/{id}/units`` gives a page of a task's units in one state with the total;
    an unknown task answers 404, an unknown state 422."""
    run_id = await submit(controller, work_doc("paged", units=12))
    await controller.step()
    answer = await api.get(
        f"/runs/{run_id}/units", params={"task": "work", "state": "queued", "limit": 5}
    )
    assert answer.status_code == 200, answer.text
    found = answer.json()
    queued_or_pending = found["total"]
    if queued_or_pending == 0:  # the window held none back: they are pending
        found = (
            await api.get(f"/runs/{run_id}/units", params={"task": "work", "state": "pending"})
        ).json()
    assert found["total"] > 0
    assert len(found["units"]) <= 5 or found["offset"] == 0
    assert [u["index"] for u in found["units"]] == sorted(u["index"] for u in found["units"])
    missing = await api.get(f"/runs/{run_id}/units", params={"task": "nope", "state": "done"})
    assert missing.status_code == 404
    wrong = await api.get(f"/runs/{run_id}/units", params={"task": "work", "state": "odd"})
    assert wrong.status_code == 422
    killed = await api.get(f"/runs/{run_id}/units", params={"task": "work", "state": "killed"})
    assert killed.json()["total"] == 0  # nothing killed for memory


async def test_the_palette_tells_each_type_s_package_and_schema(api: httpx.AsyncClient) -> None:
    """Each type of the palette has its description, ports, settings schema and the
    package providing it."""
    found = {t["name"]: t for t in (await api.get("/dashboard/types")).json()}
    work = found["svc-work"]
    assert work["package"]
    assert "properties" in work["settings_schema"]
    assert "units" in work["settings_schema"]["properties"]


async def test_the_editor_s_check_names_task_and_field(api: httpx.AsyncClient) -> None:
    """A setting of the wrong type is reported with its task, its field path and its line,
    as ``simrun validate`` reports it; a good document is ok and forecasts its units."""
    bad = "name: x\ntasks:\n  - name: w\n    type: svc-work\n    settings:\n      units: many\n"
    answer = (await api.post("/dashboard/check", json={"workflow": bad})).json()
    assert answer["ok"] is False
    (error,) = answer["errors"]
    assert error["task"] == "w"
    assert error["loc"][-1] == "units"
    assert error["line"] == 6
    good = work_doc("fine", units=7)
    answer = (await api.post("/dashboard/check", json={"workflow": good, "forecast": True})).json()
    assert answer["ok"] is True, answer
    (row,) = answer["forecast"]["tasks"]
    assert row["units"] == 7
    assert row["memory_source"]
    assert row["problem"]  # no live worker in this test


async def test_the_workers_route_without_workers(api: httpx.AsyncClient) -> None:
    """With no live worker, ``/workers`` lists none and a backlog document."""
    found = (await api.get("/workers")).json()
    assert found["workers"] == []
    (cpu,) = found["backlog"]["queues"]
    assert cpu["queue"] == "cpu"
    assert cpu["scale"]["desired"] == 0


async def test_the_workers_stream_sends_the_workers_and_ends_with_the_service(
    controller: Controller,
) -> None:
    """``/workers/events`` (over a real HTTP server) sends the workers document at once and
    ends when the service stops."""
    received: list[dict[str, object]] = []

    async def follow(url: str) -> None:
        headers = {"Authorization": f"Bearer {EVENTS_TOKEN}"}
        async with (
            httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client,
            client.stream("GET", "/workers/events") as answer,
        ):
            name = None
            async for line in answer.aiter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                if line.startswith("data: ") and name == "workers":
                    received.append(json.loads(line[6:]))

    async with serving(controller) as url:
        task = asyncio.ensure_future(follow(url))
        await until(lambda: received, timeout_s=5, what="the workers document", poll_s=0.02)
    await asyncio.wait_for(task, 10)  # the stream ended with the service
    assert received[0]["workers"] == []


async def test_a_run_s_document_is_given_back_as_submitted(
    controller: Controller, api: httpx.AsyncClient
) -> None:
    """``/runs/{id}/document`` gives the workflow text the run was submitted with (the
    Editor's layout comment included); an unknown run answers 404."""
    text = work_doc("again", units=2) + "\n# simrun-editor-layout: {}\n"
    run_id = await submit(controller, text)
    found = (await api.get(f"/runs/{run_id}/document")).json()
    assert found["workflow"] == text
    assert (await api.get("/runs/nope/document")).status_code == 404
