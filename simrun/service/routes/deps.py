"""What the routers of the API share: the controller of the app, and the error answers
(every one an `ErrorView`: a `simrun.core.views.ErrorCode` and a line)."""

from __future__ import annotations

import sqlite3
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from simrun.core.unitlogs import LogNotFound
from simrun.core.views import ErrorCode, ErrorView
from simrun.runstore.rows import RunStateError, UnknownRunError
from simrun.service.controller import Controller
from simrun.service.volumes import NoSpace, is_no_space
from simrun.workflow import WorkflowError

#: The status of each code; the first code of a status is that of an error raised with the
#: status only (FastAPI's own, an unknown route's: `BY_STATUS`).
STATUS: dict[ErrorCode, int] = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNKNOWN_RUN: 404,
    ErrorCode.UNKNOWN_KEY: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.RUN_STATE: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.INVALID: 422,
    ErrorCode.REJECTED: 422,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.NO_SPACE: 507,
}
BY_STATUS = {status: code for code, status in reversed(STATUS.items())}
#: The errors a route lets through, and their codes.
RAISED: dict[type[Exception], ErrorCode] = {
    UnknownRunError: ErrorCode.UNKNOWN_RUN,
    RunStateError: ErrorCode.RUN_STATE,
    LogNotFound: ErrorCode.NOT_FOUND,
    WorkflowError: ErrorCode.REJECTED,
    NoSpace: ErrorCode.NO_SPACE,
}
#: The error answers in the OpenAPI schema, for every route.
RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorView, "description": "Refused: the code says why, the detail how."},
    "5XX": {
        "model": ErrorView,
        "description": "Redis does not answer, a volume of the service is full (507), or a bug.",
    },
}


class ApiError(HTTPException):
    """An error answer: its code (which gives its status) and its line."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(status_code=STATUS[code], detail=detail)
        self.code = code


def answer(view: ErrorView) -> JSONResponse:
    """The response of an error."""
    return JSONResponse(view.to_dict(), status_code=STATUS[view.code])


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = exc.code if isinstance(exc, ApiError) else BY_STATUS.get(exc.status_code)
    if code is None:
        code = ErrorCode.INTERNAL if exc.status_code >= 500 else ErrorCode.BAD_REQUEST
    body = ErrorView(code, str(exc.detail)).to_dict()
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def _invalid(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return answer(ErrorView(ErrorCode.INVALID, "; ".join(lines)))


async def _raised(_request: Request, exc: Exception) -> JSONResponse:
    code = next(code for kind, code in RAISED.items() if isinstance(exc, kind))
    errors = exc.as_dicts() if isinstance(exc, WorkflowError) else None
    return answer(ErrorView(code, str(exc), errors))


async def _write_failed(request: Request, exc: Exception) -> JSONResponse:
    """A write of a route that found its volume full (ENOSPC, SQLite's "disk is full"):
    507 naming the volume, and the controller's ``problems["disk"]``; any other error goes
    on as it came (500, its traceback in the log)."""
    if not is_no_space(exc):
        raise exc
    error = await controller_of(request).no_space(exc, f"{request.method} {request.url.path}")
    return answer(ErrorView(ErrorCode.NO_SPACE, str(error)))


async def _internal(_request: Request, _exc: Exception) -> JSONResponse:
    return answer(ErrorView(ErrorCode.INTERNAL, "internal error of the service (see its log)"))


def install_errors(app: FastAPI) -> None:
    """Make every error answer of ``app`` an `ErrorView`."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    for kind in RAISED:
        app.add_exception_handler(kind, _raised)
    app.add_exception_handler(OSError, _write_failed)
    app.add_exception_handler(sqlite3.Error, _write_failed)
    app.add_exception_handler(Exception, _internal)


def controller_of(request: Request) -> Controller:
    """The controller the app was created over (`simrun.service.routes.create_app`)."""
    controller: Controller = request.app.state.controller
    return controller


def unknown_run(run_id: str) -> ApiError:
    """The 404 of a run the store does not know."""
    return ApiError(ErrorCode.UNKNOWN_RUN, f"there is no run {run_id!r}")


async def known_run(run_id: str, request: Request) -> None:
    """404 for a run the store does not know."""
    if not await controller_of(request).queries.exists(run_id):
        raise unknown_run(run_id)


#: The controller, as a parameter of a route.
ControllerDep = Annotated[Controller, Depends(controller_of)]
#: The dependencies of a route of one run: 404 when there is no such run.
ONE_RUN = [Depends(known_run)]
