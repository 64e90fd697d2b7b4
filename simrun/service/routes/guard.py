"""The gate in front of every route (ASGI middleware, so a route added later needs the
token too): the bearer token, compared in constant time and never logged, and the size of
the body, refused by its ``Content-Length`` or once the bytes received pass the limit."""

from __future__ import annotations

import hmac
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simrun.core.intake import InputLimits, body_limit, body_too_large, is_submission
from simrun.core.views import ErrorCode, ErrorView
from simrun.service.routes.deps import STATUS
from simrun.service.web import is_static

#: The paths open without the token (probes cannot send a header; /health tells no run).
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
    """A body whose bytes passed its limit while it was read (an `HTTPException`: FastAPI
    lets it through as the 413 it is)."""

    def __init__(self, limit: int, submission: bool) -> None:
        super().__init__(status_code=413, detail=body_too_large(limit, submission=submission))


async def _answer(scope: Scope, receive: Receive, send: Send, code: ErrorCode, why: str) -> None:
    challenge = {"WWW-Authenticate": "Bearer"} if code is ErrorCode.UNAUTHORIZED else None
    answer = JSONResponse(ErrorView(code, why).to_dict(), STATUS[code], challenge)
    await answer(scope, receive, send)


class Guard:
    """The token and body-size gate around ``app`` (see the module's description)."""

    def __init__(self, app: ASGIApp, token: str | None, limits: InputLimits) -> None:
        self.app = app
        self.token = token
        self.limits = limits

    def refusal(self, scope: Scope, headers: Headers) -> tuple[ErrorCode, str] | None:
        """Why a request is refused before a byte of its body is read, or None."""
        path, method = scope["path"], scope["method"]
        is_open = path in OPEN_PATHS or is_static(path)  # the web app's files hold no data
        if not is_open and not token_matches(headers.get("authorization"), self.token):
            return ErrorCode.UNAUTHORIZED, UNAUTHORIZED
        declared = headers.get("content-length")
        if declared is None:
            return None
        if not (declared.isascii() and declared.isdigit()):
            return ErrorCode.BAD_REQUEST, f"Content-Length {declared[:40]!r} is not a number"
        limit = body_limit(method, path, self.limits)
        if int(declared) > limit:
            submission = is_submission(method, path)
            return ErrorCode.TOO_LARGE, body_too_large(limit, int(declared), submission=submission)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope, Headers(scope=scope))
        if refused is not None:
            await _answer(scope, receive, send, *refused)
            return
        limit = body_limit(scope["method"], scope["path"], self.limits)
        submission = is_submission(scope["method"], scope["path"])
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
            await _answer(scope, receive, send, ErrorCode.TOO_LARGE, str(exc.detail))


def install(app: Any, token: str | None, limits: InputLimits) -> None:
    """Put the `Guard` in front of ``app`` (a FastAPI app)."""
    app.add_middleware(Guard, token=token, limits=limits)
