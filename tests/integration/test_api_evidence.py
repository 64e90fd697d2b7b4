"""``GET /resources/{key}`` over a real controller (real Redis, real SQLite): the evidence
of a key as the store holds it, the 404 of an unknown key, the token; and
``simrun resources KEY`` against a real server prints what it prints from the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from simrun.cli.group import cli
from simrun.client import Client, UnknownKey
from simrun.local.machine import free_socket
from simrun.resources import ResourceKey
from simrun.resources.store import Record
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support.reports import killed as kill
from tests.support.reports import success as report
from tests.support.service_tasks import WORK
from tests.support.wait import still_running, until

pytestmark = pytest.mark.redis

TOKEN = "s3cret-token"
#: A type the service knows (its hint applies) with no model and a variant with a slash,
#: a space and a question mark: the route reads the rest of the path as the key.
ODD = ResourceKey(WORK.name, "", "a b/c?")
#: A type neither the service nor this environment knows: both use the default hint.
PLAIN = ResourceKey("nope", "plate", "64")


async def fill(controller: Controller) -> None:
    for key in (ODD, PLAIN):
        await controller.resources.record(key, kill(0.2), 0.1, oom=True, run="r0")
        await controller.resources.record_many(
            Record(key, report(0.3 + 0.02 * i, 0.4), 0.1, run=f"r{i % 2}") for i in range(12)
        )


async def test_the_route_answers_the_evidence_the_store_holds(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """The evidence of a key is the store's (`ResourceStore.evidence` with the hint of the
    service's task type) as JSON, whatever characters the variant holds."""
    await fill(controller)
    response = await api.get("/resources/" + quote(ODD.text(), safe="/"))
    assert response.status_code == 200, response.text
    expected = await controller.resources.evidence(ODD, WORK.hint)
    assert response.json() == expected.to_dict()
    body = response.json()
    assert (body["key"], len(body["peaks_gb"]), body["observations"]) == (ODD.text(), 24, 25)
    assert body["explanation"]["hint_gb"] == WORK.hint.memory_per_worker_gb
    assert body["explanation"]["reasons"]


@pytest.mark.parametrize(
    ("key", "detail"),
    [
        ("nope/plate/46", "no observations of resource key 'nope/plate/46'; "
                          "did you mean nope/plate/64?"),
        ("nope", "resource key 'nope' is not 'task_type/model' or 'task_type/model/variant'; "
                 "did you mean nope/plate/64?"),
    ],
)  # fmt: skip
async def test_an_unknown_key_answers_404_naming_it_and_close_keys(
    api: httpx.AsyncClient, controller: Controller, key: str, detail: str
) -> None:
    """A key without observations, or that is no key, answers 404 (code unknown_key) with
    one line naming it and the known keys close to it."""
    await fill(controller)
    response = await api.get(f"/resources/{key}")
    assert response.status_code == 404
    assert response.json() == {"code": "unknown_key", "detail": detail}


async def test_the_route_needs_the_token(controller: Controller) -> None:
    """With a token, the route answers 401 without it, and the evidence with it."""
    await fill(controller)
    transport = httpx.ASGITransport(app=create_app(controller, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        assert (await client.get(f"/resources/{PLAIN.text()}")).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        answer = await client.get(f"/resources/{PLAIN.text()}", headers=right)
        assert answer.status_code == 200
        assert answer.json()["key"] == PLAIN.text()


@pytest.fixture
async def live(controller: Controller) -> AsyncIterator[str]:
    """A real uvicorn server of the API over ``controller`` (the blocking client and the
    command line need a socket); its URL."""
    sock = free_socket()
    server = uvicorn.Server(
        uvicorn.Config(create_app(controller), log_config=None, access_log=False, lifespan="off")
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await until(lambda: server.started, timeout_s=60, what="uvicorn", check=still_running(task))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["resources", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


async def test_the_command_prints_the_same_from_the_service_and_the_store(
    live: str, controller: Controller
) -> None:
    """`simrun resources KEY --url` (the client over a real server) prints what `--store`
    prints of the same store, the evidence as JSON and an unknown key's error line alike;
    the client raises `UnknownKey` with the service's line."""
    await fill(controller)
    store = str(controller.settings.store)
    for args in ([PLAIN.text()], [PLAIN.text(), "--json"], ["nope/plate/46"]):
        remote = await asyncio.to_thread(run, *args, "--url", live)
        local = await asyncio.to_thread(run, *args, "--store", store)
        assert remote == local
    assert local[:2] == (1, "")
    assert "why" in (await asyncio.to_thread(run, PLAIN.text(), "--url", live))[1].splitlines()

    def ask(key: str) -> dict[str, object]:
        with Client(live) as client:
            return client.resource_evidence(key)

    assert (await asyncio.to_thread(ask, ODD.text()))["key"] == ODD.text()
    with pytest.raises(UnknownKey, match=r"^no observations of resource key 'x/y'"):
        await asyncio.to_thread(ask, "x/y")
