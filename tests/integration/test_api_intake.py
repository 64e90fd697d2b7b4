"""What the HTTP API accepts (issue 11, items 1-4): sources only from uploads, bounded
uploads and bodies, the token in front of every route, documents that cannot stall the
service. A real controller (real Redis, real SQLite) under the real FastAPI app, through
httpx's ASGI transport or a real uvicorn server on a loopback port (for what only a socket
shows: a body refused before it is sent)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.routing import Route

from simrun.client import Client, ClientError, directory_files
from simrun.core.intake import InputLimits
from simrun.local.machine import free_socket
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from simrun.service.web import is_static
from simrun.workflow import WorkflowError
from tests.support import REPO
from tests.support.service_harness import TYPES, settings
from tests.support.wait import still_running, until

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()
PLATE = (REPO / "examples" / "plate.json").read_bytes()
TOKEN = "s3cret-token-of-the-intake-tests"
LIMITS = InputLimits(
    max_request_bytes=64 * 1024,
    max_workflow_bytes=16 * 1024,
    max_file_bytes=1024,
    max_files=4,
    max_depth=2,
    max_tasks=5,
)


def heat_with_source(path: str) -> str:
    """The heat example with its source ``plate`` at ``path``."""
    return HEAT.replace("plate: plate.json", f"plate: {json.dumps(path)}")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def run_files(controller: Controller) -> list[Path]:
    runs = controller.settings.store / "runs"
    return [p for p in runs.rglob("*") if p.is_file()] if runs.exists() else []


@pytest.fixture
async def limited(tmp_path: Path, redis_url: str, redis_prefix: str) -> AsyncIterator[Controller]:
    """A controller whose intake limits are small (`LIMITS`)."""
    options = settings(tmp_path / "store", redis_url, redis_prefix, intake=LIMITS)
    ctl = await Controller.open(options, TYPES)
    try:
        yield ctl
    finally:
        await ctl.close()


@dataclass
class Live:
    url: str
    port: int


async def _serve(controller: Controller, token: str | None) -> AsyncIterator[Live]:
    sock = free_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(controller, token), log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await until(lambda: server.started, timeout_s=60, what="uvicorn", check=still_running(task))
    try:
        yield Live(f"http://127.0.0.1:{port}", port)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


@pytest.fixture
async def live(limited: Controller) -> AsyncIterator[Live]:
    """A real uvicorn server of the API over ``limited``, without a token."""
    async for found in _serve(limited, None):
        yield found


@pytest.fixture
async def live_token(limited: Controller) -> AsyncIterator[Live]:
    """A real uvicorn server of the API over ``limited``, with `TOKEN`."""
    async for found in _serve(limited, TOKEN):
        yield found


def raw_request(port: int, head: str, body: bytes = b"", wait_s: float = 5.0) -> tuple[int, str]:
    """Send ``head`` (and ``body``) on a new connection and read the answer's status and
    body, waiting at most ``wait_s``: a server that waits for a body never sent times out."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as conn:
        conn.sendall(head.encode() + b"\r\n" + body)
        data = b""
        try:
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            return 0, "no answer within the wait"
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1].decode(errors="replace")


def _length(data: bytes) -> int:
    found = re.search(rb"content-length: (\d+)", data.split(b"\r\n\r\n", 1)[0], re.IGNORECASE)
    return int(found.group(1)) if found else 0


# -- 1. sources are uploads only ---------------------------------------------------------


async def test_a_source_path_of_the_host_is_never_read(
    api: httpx.AsyncClient, controller: Controller, tmp_path: Path
) -> None:
    """A workflow naming a file or directory of the service's host (absolute, or with
    '..') and uploading nothing is a 422 naming the source; nothing is copied."""
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    (secret_dir / "key").write_text("do not copy me")
    for path in ["/etc/hostname", str(secret_dir), str(tmp_path / "secrets" / ".." / "secrets")]:
        response = await api.post("/runs", json={"workflow": heat_with_source(path)})
        assert response.status_code == 422, (path, response.text)
        (error,) = response.json()["errors"]
        assert error["where"] == "sources.plate"
        assert "source 'plate' was not uploaded" in error["message"]
    assert run_files(controller) == []
    assert (await api.get("/runs")).json() == []


async def test_an_upload_that_is_no_source_is_refused(api: httpx.AsyncClient) -> None:
    """An upload the workflow does not name, and a file name of '..', are refused naming
    the source (no file is written outside the source's directory)."""
    sources = {
        "plate": {"filename": "..", "content_b64": b64(PLATE)},
        "extra": {"filename": "x", "content_b64": b64(b"{}")},
    }
    response = await api.post("/runs", json={"workflow": HEAT, "sources": sources})
    assert response.status_code == 422
    by_where = {e["where"]: e["message"] for e in response.json()["errors"]}
    assert "contains '..'" in by_where["sources.plate"]
    assert "was uploaded but is not a source of the workflow" in by_where["sources.extra"]


async def test_a_directory_source_is_uploaded_by_the_client(
    limited: Controller, live: Live, tmp_path: Path
) -> None:
    """`simrun submit`'s client sends a directory source as its files with relative paths
    (a link to a file inside it is sent as that file); the run keeps the same tree."""
    mesh = tmp_path / "mesh"
    (mesh / "parts").mkdir(parents=True)
    (mesh / "plate.json").write_bytes(PLATE[:900])
    (mesh / "parts" / "a.txt").write_text("a")
    (mesh / "alias.txt").symlink_to(mesh / "parts" / "a.txt")
    text = HEAT.replace("plate: plate.json", "plate: mesh")
    with Client(live.url) as client:
        run_id = await asyncio.to_thread(client.submit, text, {"plate": mesh})
    copy = limited.settings.store / "runs" / run_id / "sources" / "plate" / "mesh"
    found = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file())
    assert found == ["alias.txt", "parts/a.txt", "plate.json"]
    assert (copy / "alias.txt").read_text() == "a"
    assert not (copy / "alias.txt").is_symlink()


def test_the_client_refuses_links_out_links_to_directories_and_devices(tmp_path: Path) -> None:
    """A directory source with a link leading out of it, a link to a directory, or a FIFO
    is refused by the client naming the source and the path (a FIFO would never end)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    cases = {
        "out": lambda d: (d / "leak").symlink_to(outside),
        "dir": lambda d: (d / "loop").symlink_to(d),
        "fifo": lambda d: os.mkfifo(d / "pipe"),
    }
    expected = {
        "out": "'leak' is a symbolic link out of the directory",
        "dir": "'loop' is a symbolic link to a directory",
        "fifo": "'pipe' is not a regular file",
    }
    for name, make in cases.items():
        directory = tmp_path / name
        directory.mkdir()
        (directory / "ok.txt").write_text("fine")
        make(directory)
        with pytest.raises(WorkflowError) as caught:
            directory_files("model", directory)
        assert caught.value.problems[0].where() == "sources.model"
        assert expected[name] in caught.value.problems[0].message


UPLOAD_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("file too big", {"content_b64": b64(b"x" * 1025)}, "source 'plate' is 1.0 KiB; the most"),
    (
        "too many files",
        {"files": [{"path": f"f{i}", "content_b64": b64(b"1")} for i in range(5)]},
        "5 files were sent; a submission may have at most 4",
    ),
    (
        "too deep",
        {"files": [{"path": "a/b/c/d.txt", "content_b64": b64(b"1")}]},
        "is 3 directories deep; the most accepted is 2",
    ),
    ("absolute", {"files": [{"path": "/etc/passwd", "content_b64": ""}]}, "is absolute"),
    ("dot-dot", {"files": [{"path": "a/../../x", "content_b64": ""}]}, "'..' part"),
    (
        "twice",
        {"files": [{"path": "a", "content_b64": ""}, {"path": "a", "content_b64": ""}]},
        "given twice",
    ),
    (
        "file and directory",
        {"files": [{"path": "a", "content_b64": ""}, {"path": "a/b", "content_b64": ""}]},
        "is both a file and a directory",
    ),
    ("neither", {"filename": "x"}, "give either content_b64 (a file) or files"),
    (
        "big file in a directory",
        {"files": [{"path": "big", "content_b64": b64(b"x" * 2000)}]},
        "file 'big' is 2.0 KiB; the most accepted is 1 KiB",
    ),
]


@pytest.mark.parametrize(
    ("case", "upload", "message"), UPLOAD_CASES, ids=[c[0] for c in UPLOAD_CASES]
)
async def test_uploads_are_bounded(
    limited: Controller, case: str, upload: dict[str, Any], message: str
) -> None:
    """Each bound of an upload (bytes per file, file count, depth, safe relative paths) is
    a 422 naming the source and the limit; no run is made."""
    transport = httpx.ASGITransport(app=create_app(limited))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
        body = {"workflow": HEAT, "sources": {"plate": upload}}
        response = await api.post("/runs", json=body)
        assert response.status_code == 422, response.text
        errors = response.json()["errors"]
        assert any(message in e["message"] for e in errors), errors
        assert all(e["where"].startswith("sources") for e in errors)
        assert (await api.get("/runs")).json() == []


# -- 4. bodies, documents and task counts are bounded ------------------------------------


async def test_a_body_past_the_limit_is_refused_before_it_is_sent(live: Live) -> None:
    """A POST /runs whose Content-Length is past the limit is answered 413 naming the
    limit at once, without the service waiting for (or holding) the body."""
    head = (
        "POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10**9}\r\n"
    )
    status, body = await asyncio.to_thread(raw_request, live.port, head)
    assert status == 413, body
    assert "larger than the service accepts: 64 KiB" in body
    assert "--max-request-bytes" in body


async def test_a_streamed_body_past_the_limit_is_refused(live: Live) -> None:
    """A body sent in chunks without a length is refused (413) once its bytes pass the
    limit, naming it."""

    async def chunks() -> Any:
        for _ in range(200):
            yield b"x" * 1024

    async with httpx.AsyncClient(base_url=live.url) as client:
        response = await client.post("/runs", content=chunks())
    assert response.status_code == 413, response.text
    assert "64 KiB" in response.json()["detail"]


async def test_a_workflow_past_the_limit_or_of_too_many_tasks_is_refused(
    limited: Controller,
) -> None:
    """A workflow document past max_workflow_bytes, and one of more tasks than max_tasks,
    are refused (422) with the size or count and the limit; nothing is stored."""
    transport = httpx.ASGITransport(app=create_app(limited))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
        big = HEAT + "\n#" + "x" * 20_000
        response = await api.post("/runs", json={"workflow": big})
        assert response.status_code == 422
        assert "the most accepted is 16 KiB" in response.json()["errors"][0]["message"]
        tasks = [{"name": f"t{i}", "type": "svc-work", "settings": {}} for i in range(6)]
        response = await api.post("/runs", json={"workflow": json.dumps({"tasks": tasks})})
        assert response.status_code == 422
        message = response.json()["errors"][0]["message"]
        assert "the workflow has 6 tasks; a run may have at most 5" in message
        assert "--max-tasks" in message
        assert (await api.get("/runs")).json() == []


async def test_alias_bombs_and_deep_nesting_are_refused(api: httpx.AsyncClient) -> None:
    """A "billion laughs" document (aliases that expand to 9**9 values) and documents
    nested thousands of levels deep are refused with a 422 saying why, at once."""
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for name, prev in zip("bcdefghi", "abcdefgh", strict=True):
        bomb += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    bomb += "tasks: [{name: t, type: svc-work, settings: {tags: *i}}]\n"
    deep_flow = "tasks: " + "[" * 50_000 + "]" * 50_000
    deep_block = "tasks:\n" + "".join(" " * i + "- \n" for i in range(2000))
    cases = {
        bomb: "more than 1000000 values once its aliases are expanded",
        deep_flow: "nest",
        deep_block: "nested more than 64 levels deep",
    }
    for text, message in cases.items():
        response = await api.post("/runs", json={"workflow": text})
        assert response.status_code == 422, response.text[:200]
        assert message in response.json()["errors"][0]["message"]


async def test_a_body_that_is_not_a_submission_is_a_422(api: httpx.AsyncClient) -> None:
    """A body that is not JSON, or not a submission, is a 422 saying so (no traceback)."""
    response = await api.post("/runs", content=b"{not json")
    assert response.status_code == 422
    assert "the body is not JSON" in response.json()["errors"][0]["message"]
    response = await api.post("/runs", json={"workflow": 3, "surprise": 1})
    assert response.status_code == 422
    wheres = {e["where"] for e in response.json()["errors"]}
    assert wheres == {"body.workflow", "body.surprise"}


# -- 2 and 3. the token ------------------------------------------------------------------


def _routes(routes: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every (method, path) of ``routes`` (an app's, and of the routers it includes), path
    parameters filled in; a route of another kind (a mount) fails the test."""
    found: list[tuple[str, str]] = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            found += _routes(included.routes, prefix + route.include_context.prefix)
            continue
        assert isinstance(route, Route), f"a route of an unknown kind: {route!r}"
        path = re.sub(r"\{[^}]+\}", "x", prefix + route.path)
        found.extend((m, path) for m in sorted(route.methods or {"GET"}) if m != "HEAD")
    return found


async def test_every_route_but_health_needs_the_token(limited: Controller) -> None:
    """With a token, every route of the app (enumerated from app.routes, so a route added
    later is checked too; /openapi.json included) answers 401 without it or with a wrong
    one; only /health and the web app's files (the page and its bundle, which hold no
    data) are open. There are no CDN-based /docs or /redoc pages."""
    app = create_app(limited, token=TOKEN)
    routes = _routes(app.routes)
    assert len(routes) >= 12, routes
    assert ("GET", "/openapi.json") in routes
    assert ("GET", "/metrics") in routes
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        for method, path in [*routes, ("GET", "/docs"), ("GET", "/redoc")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                response = await client.request(method, path, headers=headers)
                if is_static(path):  # the web app's files: open, they hold no data
                    assert response.status_code in (200, 404), (method, path, headers)
                    continue
                expected = 200 if path == "/health" else 401
                assert response.status_code == expected, (method, path, headers)
                assert TOKEN not in response.text
        right = {"Authorization": f"Bearer {TOKEN}"}
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert (await client.get(path, headers=right)).status_code == 404
        schema = await client.get("/openapi.json", headers=right)
        assert schema.status_code == 200
        assert "/runs" in schema.json()["paths"]
        assert "cdn" not in schema.text.lower()


async def test_a_token_header_that_is_not_ascii_is_a_401(limited: Controller) -> None:
    """A bearer value with bytes that are not ASCII is a wrong token (401), not an error
    of the service (compare_digest refuses such strings)."""
    transport = httpx.ASGITransport(app=create_app(limited, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        response = await client.get("/runs", headers={"Authorization": b"Bearer \xe9t\xe9"})
        assert response.status_code == 401


async def test_no_body_is_read_without_the_token(live_token: Live) -> None:
    """Without the token, a submission is refused (401) before its body is read: a client
    without the token cannot make the service hold or parse a large body."""
    head = (
        "POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {60 * 1024}\r\n"
    )
    status, body = await asyncio.to_thread(raw_request, live_token.port, head)
    assert status == 401, body
    assert TOKEN not in body


def test_an_empty_token_is_refused(limited: Controller) -> None:
    """A service given an empty token refuses to start rather than accept 'Bearer '."""
    with pytest.raises(ValueError, match="token is empty"):
        create_app(limited, token=" ")


def test_client_errors_do_not_show_the_token() -> None:
    """A client error (the service unreachable) does not show the token."""
    with Client("http://127.0.0.1:9", TOKEN) as client, pytest.raises(ClientError) as caught:
        client.runs()
    assert TOKEN not in str(caught.value)
