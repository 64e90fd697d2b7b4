"""``simrun service``: the controller loop and the HTTP API of a deployment."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from simrun.cli.common import load_types_from_here
from simrun.cli.dashboard import dashboard_url
from simrun.cli.options import (
    PLUGINS,
    PREFIX,
    PROBE,
    REDIS_TIMEOUT_S,
    REDIS_URL,
    REDIS_WAIT_S,
    SERVICE_HEARTBEAT_TTL_S,
    STORE,
    TOKEN,
    intake_options,
    limits_options,
)
from simrun.core.intake import InputLimits
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.core.states import Limits
from simrun.queues.connect import RedisUnusable
from simrun.service.main import serve
from simrun.service.settings import ControllerSettings

__all__ = ["service"]

SHAPE_MEMORY_HELP = (
    "Memory (GiB) of one worker container, as its --memory-gb: what /metrics decides the "
    "desired workers of a queue with while none of its workers is live."
)
SHAPE_PROCESSES_HELP = (
    "Processes of one worker container, as its --processes (see --worker-memory-gb)."
)


def _say_listening(url: str) -> None:
    """The lines that say where the service answers, and its web app, on stdout, once it
    does."""
    click.echo(f"simrun service listening on {url}")
    click.echo(f"dashboard {dashboard_url(url)}")


@click.command("service")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535))
@STORE
@REDIS_URL
@PREFIX
@TOKEN
@PLUGINS
@limits_options
@click.option(
    "--worker-memory-gb", type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_SHAPE.memory_gb, show_default=True, help=SHAPE_MEMORY_HELP,
)  # fmt: skip
@click.option(
    "--worker-processes", type=click.IntRange(min=1), default=DEFAULT_SHAPE.processes,
    show_default=True, help=SHAPE_PROCESSES_HELP,
)  # fmt: skip
@SERVICE_HEARTBEAT_TTL_S
@intake_options
@REDIS_WAIT_S
@REDIS_TIMEOUT_S
@PROBE
def service(
    host: str,
    port: int,
    store: Path,
    redis_url: str,
    prefix: str,
    token: str | None,
    plugins: tuple[str, ...],
    max_retries: int,
    max_kills: int,
    worker_memory_gb: float,
    worker_processes: int,
    heartbeat_ttl_s: float,
    intake: InputLimits,
    redis_wait_s: float | None,
    redis_timeout_s: float,
    probe: bool,
) -> None:
    """Run the service: the controller loop and the HTTP API."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    types = load_types_from_here(plugins)
    settings = ControllerSettings(
        store=store.resolve(),
        redis_url=redis_url,
        prefix=prefix,
        limits=Limits(max_retries=max_retries, max_kills=max_kills),
        heartbeat_ttl_s=heartbeat_ttl_s,
        intake=intake,
        redis_wait_s=redis_wait_s,
        redis_timeout_s=redis_timeout_s,
        probe=probe,
    )
    shape = ContainerShape(memory_gb=worker_memory_gb, processes=worker_processes)
    try:
        asyncio.run(
            serve(
                settings, types, host=host, port=port, token=token, default_shape=shape,
                on_listening=_say_listening,
            )
        )  # fmt: skip
    except RedisUnusable as exc:
        raise click.ClickException(str(exc)) from None
