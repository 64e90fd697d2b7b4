"""A request handed to an ASGI app as a server hands it: ``raw_path`` and its decoded
``path`` with dot segments and encoded slashes left in (httpx would normalize them)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

from fastapi import FastAPI


async def raw_get(
    app: FastAPI, raw: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """``GET raw`` (path and query, as on the wire) through ``app``: status and body."""
    path, _, query = raw.partition("?")
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": unquote(path, errors="surrogateescape"),
        "raw_path": path.encode("ascii"),
        "root_path": "",
        "query_string": query.encode("ascii"),
        "headers": [(b"host", b"simrun")]
        + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []
    received: list[bool] = []

    async def receive() -> dict[str, Any]:
        if received:  # the body was read: the client stays until the answer is sent
            await asyncio.Event().wait()
        received.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), body
