"""What the routers of the API share: the controller of the app, and the bearer token."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from simrun.service.controller import Controller

__all__ = ["AUTH", "ControllerDep", "authorized", "controller_of", "known_run"]


def controller_of(request: Request) -> Controller:
    """The controller the app was created over (`simrun.service.api.create_app`)."""
    controller: Controller = request.app.state.controller
    return controller


async def authorized(request: Request) -> None:
    """Nothing when the service has no token; else ``Authorization: Bearer <token>`` or 401."""
    token: str | None = request.app.state.token
    if token is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong bearer token (set SIMRUN_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def known_run(run_id: str, request: Request) -> None:
    """404 for a run the store does not know."""
    if not await controller_of(request).queries.exists(run_id):
        raise HTTPException(status_code=404, detail=f"there is no run {run_id!r}")


#: The dependencies of every route but /health.
AUTH = [Depends(authorized)]
#: The controller, as a parameter of a route.
ControllerDep = Annotated[Controller, Depends(controller_of)]
