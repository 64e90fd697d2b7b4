"""``simrun service``: the controller loop and the HTTP API of a deployment."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import click

from simrun.app.types import load_types_from_here
from simrun.cli.dashboard import dashboard_url
from simrun.cli.options import PLUGINS, TOKEN
from simrun.config import click_options
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.queues.connect import RedisUnusable
from simrun.service.main import DatabaseVolumeError, check_database, serve
from simrun.service.settings import ControllerSettings

SHAPE_MEMORY_HELP = (
    "Memory (GiB) of one worker container, as its --worker-memory-gb: what /metrics decides the "
    "desired workers of a queue with while none of its workers is live."
)
SHAPE_PROCESSES_HELP = (
    "Processes of one worker container, as its --processes (see --worker-memory-gb)."
)
NETWORK_FS_HELP = "Start even when the SQLite file is on a network file system (nfs, cifs, ...)."


def _say_listening(url: str) -> None:
    """Say where the service answers, and its web app, once it does."""
    click.echo(f"simrun service listening on {url}")
    click.echo(f"dashboard {dashboard_url(url)}")


@click.command("service")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535))
@click_options(ControllerSettings)
@TOKEN
@PLUGINS
@click.option(
    "--worker-memory-gb", type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_SHAPE.memory_gb, show_default=True, help=SHAPE_MEMORY_HELP,
)  # fmt: skip
@click.option(
    "--worker-processes", type=click.IntRange(min=1), default=DEFAULT_SHAPE.processes,
    show_default=True, help=SHAPE_PROCESSES_HELP,
)  # fmt: skip
@click.option("--db-on-network-fs", is_flag=True, help=NETWORK_FS_HELP)
def service(
    host: str,
    port: int,
    settings: ControllerSettings,
    token: str | None,
    plugins: tuple[str, ...],
    worker_memory_gb: float,
    worker_processes: int,
    db_on_network_fs: bool,
) -> None:
    """Run the service: the controller loop and the HTTP API."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # an empty --environment-image is none
    settings = dataclasses.replace(settings, environment_image=settings.environment_image or None)
    try:
        check_database(settings.database, on_network_fs=db_on_network_fs)
    except DatabaseVolumeError as exc:
        raise click.ClickException(str(exc)) from None
    types = load_types_from_here(plugins)
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
