"""The HTTP API of the service (FastAPI) over one `Controller`: one router per resource
behind `guard`; every error answer is an `ErrorView` (`deps`). No /docs pages (FastAPI's
load scripts from a CDN); the schema is /openapi.json."""

from __future__ import annotations

from fastapi import FastAPI

from simrun import __version__
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.service import web
from simrun.service.controller import Controller
from simrun.service.routes import (
    deps,
    editor,
    events,
    guard,
    logs,
    monitoring,
    resources,
    runs,
    types,
)


def create_app(
    controller: Controller,
    token: str | None = None,
    *,
    default_shape: ContainerShape = DEFAULT_SHAPE,
) -> FastAPI:
    """The API over ``controller``; with ``token``, every route but /health needs it.
    ``default_shape``: the worker container of a queue none of whose workers is live."""
    if token is not None and not token.strip():
        raise ValueError("the service's token is empty: give a token, or none")
    app = FastAPI(
        title="simrun",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        responses=deps.RESPONSES,
    )
    guard.install(app, token, controller.settings.intake)
    deps.install_errors(app)
    app.state.controller = controller
    app.state.default_shape = default_shape
    app.include_router(monitoring.health_router)
    app.include_router(types.router)
    app.include_router(runs.router)
    app.include_router(events.router)
    app.include_router(logs.router)
    app.include_router(resources.router)
    app.include_router(monitoring.router)
    app.include_router(editor.router)
    app.include_router(web.router)
    return app
