"""What the routers of the API share: the controller of the app. (The bearer token is
checked in front of every route by `simrun.service.api.guard`.)"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from simrun.service.controller import Controller


def controller_of(request: Request) -> Controller:
    """The controller the app was created over (`simrun.service.api.create_app`)."""
    controller: Controller = request.app.state.controller
    return controller


async def known_run(run_id: str, request: Request) -> None:
    """404 for a run the store does not know."""
    if not await controller_of(request).queries.exists(run_id):
        raise HTTPException(status_code=404, detail=f"there is no run {run_id!r}")


#: The controller, as a parameter of a route.
ControllerDep = Annotated[Controller, Depends(controller_of)]
