"""The gate in front of every route: the bearer token and the size of the request body.

It is ASGI middleware rather than a dependency of each router, so that

* a route added later (FastAPI's own /openapi.json included) needs the token without
  anyone remembering it: only `OPEN_PATHS` and the web app's files
  (`simrun.service.web.is_static`: they hold no data) are open;
* a request without the token is refused before its body is read, and a body past its
  limit (`simrun.core.intake.body_limit`) is refused from its ``Content-Length`` before a
  byte of it is read, or as soon as the bytes received pass the limit when it gave none
  (chunked) or lied: the service never holds more than the limit of one body.

The token is compared in constant time (`hmac.compare_digest`, on bytes: a header that is
not ASCII is a wrong token, not an error) and is never put in a message or a log line.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simrun.core.intake import InputLimits, body_limit, body_too_large, is_submission
from simrun.service.web import is_static

#: The paths that answer without the token: liveness probes cannot send a header, and
#: /health tells nothing of the runs.
OPEN_PATHS = frozenset({"/health"})

UNAUTHORIZED = "missing or wrong bearer token (set SIMRUN_TOKEN)"


def token_matches(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (always, without a token)."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))


class BodyTooLarge(HTTPException):
    """A body whose bytes passed its limit while it was read (an `HTTPException`, so
    FastAPI's body reading lets it through as the 413 it is)."""

    def __init__(self, limit: int, submission: bool) -> None:
        super().__init__(status_code=413, detail=body_too_large(limit, submission=submission))


async def _answer(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Guard:
    """The token and body-size gate around ``app`` (see the module's description)."""

    def __init__(self, app: ASGIApp, token: str | None, limits: InputLimits) -> None:
        if token is not None and not token.strip():
            raise ValueError("the service's token is empty: give a token, or none")
        self.app = app
        self.token = token
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path: str = scope["path"]
        is_open = path in OPEN_PATHS or is_static(path)  # the web app's files hold no data
        if not is_open and not token_matches(headers.get("authorization"), self.token):
            await _answer(send, 401, UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])
            return
        limit = body_limit(scope["method"], path, self.limits)
        submission = is_submission(scope["method"], path)
        declared = headers.get("content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await _answer(send, 400, f"Content-Length {declared[:40]!r} is not a number")
                return
            if length > limit:
                await _answer(send, 413, body_too_large(limit, length, submission=submission))
                return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit, submission)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await _answer(send, 413, str(exc.detail))


def install(app: Any, token: str | None, limits: InputLimits) -> None:
    """Put the `Guard` in front of ``app`` (a FastAPI app)."""
    app.add_middleware(Guard, token=token, limits=limits)
