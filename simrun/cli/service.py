"""``simrun service``: the controller loop and the HTTP API of a deployment."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import click

from simrun.cli.common import load_types_from_here
from simrun.cli.dashboard import dashboard_url
from simrun.cli.options import PLUGINS, TOKEN, intake_options, limits_options
from simrun.core.intake import InputLimits
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.core.states import Limits
from simrun.queues.connect import RedisUnusable
from simrun.service.main import DatabaseVolumeError, check_database, serve
from simrun.service.settings import ControllerSettings, click_options

SHAPE_MEMORY_HELP = (
    "Memory (GiB) of one worker container, as its --worker-memory-gb: what /metrics decides the "
    "desired workers of a queue with while none of its workers is live."
)
SHAPE_PROCESSES_HELP = (
    "Processes of one worker container, as its --processes (see --worker-memory-gb)."
)


NETWORK_FS_HELP = "Start even when the SQLite file is on a network file system (nfs, cifs, ...)."


def _say_listening(url: str) -> None:
    """The lines that say where the service answers, and its web app, on stdout, once it
    does."""
    click.echo(f"simrun service listening on {url}")
    click.echo(f"dashboard {dashboard_url(url)}")


@click.command("service")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535))
@click_options
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
@intake_options
@click.option("--db-on-network-fs", is_flag=True, help=NETWORK_FS_HELP)
def service(
    host: str,
    port: int,
    settings: ControllerSettings,
    token: str | None,
    plugins: tuple[str, ...],
    max_retries: int,
    max_kills: int,
    worker_memory_gb: float,
    worker_processes: int,
    intake: InputLimits,
    db_on_network_fs: bool,
) -> None:
    """Run the service: the controller loop and the HTTP API."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    limits = Limits(max_retries=max_retries, max_kills=max_kills)
    settings = dataclasses.replace(settings, limits=limits, intake=intake)
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
