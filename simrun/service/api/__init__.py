"""The HTTP API of the service (FastAPI), over one `Controller`.

Routes (JSON in and out; a bearer token is required when the service has one):

    GET  /health                      liveness, Redis reachability, live workers
    GET  /types                       installed task types (ports, hint, settings schema)
    POST /runs                        submit {"workflow": text, "sources": {name: upload}}
    GET  /runs                        the latest runs
    GET  /runs/{id}                   one run: per task its units by state, ETA, start
                                      and end, kills for memory, memory per process
                                      requested and at its peak
    GET  /runs/{id}/failures          failed units with their tracebacks
    GET  /runs/{id}/events            the run's view as server-sent events while it runs
    POST /runs/{id}/replay            {"task"?, "units"?, "memory_gb"?, "all"?}: failed
                                      units back; with "all", every unit of "task"
                                      and of the tasks reading it
    POST /runs/{id}/cancel
    GET  /resources                   what is learned per resource key
    GET  /resources/{key}             one key's request and why, its peaks and kills
    GET  /backlog                     per queue: the units not done by resource key, and
                                      the live workers' count and shape (`simrun scale`)
    GET  /metrics                     Prometheus text format 0.0.4 (`simrun.service.metrics`)
    GET  /openapi.json                the schema of these routes
    GET  /dashboard/..., /workers, /runs/{id}/units
                                      what the web app's pages need
                                      (`simrun.service.api.dashboard`)
    GET  /, /assets/...               the web app (`simrun.service.web`): open, no data

A rejected document creates nothing and answers 422 with every problem; an unknown run
or resource key answers 404, a replay or cancel its state does not allow 409.

One router per resource: `runs` (a submission is read by `submission`; its events are
`events`), `types`,
`resources`, and `monitoring` (health, backlog, metrics); `deps` holds the controller
dependency they share. `guard` stands in front of them all: the bearer token (every path
but /health, the ones added later and /openapi.json included) and the size of the body
(`simrun.core.intake.InputLimits`). There are no /docs or /redoc pages (FastAPI's load
their scripts from a CDN); the schema is /openapi.json, behind the token.

/metrics stays behind the token when the service has one, like every route but /health:
it tells the queues, image names and load of the installation, and /health is open only
because probes cannot send a header. Prometheus sends the token itself; in the scrape job::

    - job_name: simrun
      authorization:
        type: Bearer
        credentials_file: /etc/prometheus/simrun-token   # the value of SIMRUN_TOKEN
      static_configs:
        - targets: ["simrun-service:8765"]

(``bearer_token_file:`` in Prometheus before 2.26). A Prometheus that finds its targets
from pod annotations needs such a job too, with its ``kubernetes_sd_configs``; KEDA asks
Prometheus, not the service, and needs nothing more.
"""

from __future__ import annotations

from fastapi import FastAPI

from simrun import __version__
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.service import web
from simrun.service.api import (
    dashboard,
    events,
    guard,
    logs,
    monitoring,
    resources,
    runs,
    types,
)
from simrun.service.controller import Controller


def create_app(
    controller: Controller,
    token: str | None = None,
    *,
    default_shape: ContainerShape = DEFAULT_SHAPE,
) -> FastAPI:
    """The API over ``controller``; with ``token``, every route but /health needs
    ``Authorization: Bearer <token>``. ``default_shape`` is the worker container /metrics
    decides the desired workers of a queue with while none of its workers is live."""
    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN, and a service
    # without network is a normal deployment. The schema stays at /openapi.json, behind
    # the token like every route but /health.
    if token is not None and not token.strip():
        raise ValueError("the service's token is empty: give a token, or none")
    app = FastAPI(title="simrun", version=__version__, docs_url=None, redoc_url=None)
    guard.install(app, token, controller.settings.intake)
    app.state.controller = controller
    app.state.token = token
    app.state.default_shape = default_shape
    app.include_router(monitoring.health_router)
    app.include_router(types.router)
    app.include_router(runs.router)
    app.include_router(events.router)
    app.include_router(logs.router)
    app.include_router(resources.router)
    app.include_router(monitoring.router)
    app.include_router(dashboard.router)
    app.include_router(web.router)
    return app
