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
from simrun.config import ENV_DB, ENV_ENVIRONMENT_IMAGE
from simrun.core.intake import InputLimits
from simrun.core.layout import StoreLayout
from simrun.core.scaling import DEFAULT_SHAPE, ContainerShape
from simrun.core.states import Limits
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


DB_HELP = (
    "The service's SQLite file, on a local volume [default: STORE/simrun.db]. The store is "
    "shared with the workers, often over a network file system, where SQLite's locks may not hold."
)
ENVIRONMENT_IMAGE_HELP = (
    "The environment image of a run whose workflow names none (its `image:`): its tasks "
    "whose type has no image go to that image's queue [default: none, the cpu and gpu queues]."
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
@click.option(
    "--db", type=click.Path(dir_okay=False, path_type=Path), envvar=ENV_DB, show_envvar=True,
    default=None, help=DB_HELP,
)  # fmt: skip
@click.option("--db-on-network-fs", is_flag=True, help=NETWORK_FS_HELP)
@click.option(
    "--environment-image", envvar=ENV_ENVIRONMENT_IMAGE, show_envvar=True, default=None,
    help=ENVIRONMENT_IMAGE_HELP,
)  # fmt: skip
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
    db: Path | None,
    db_on_network_fs: bool,
    environment_image: str | None,
) -> None:
    """Run the service: the controller loop and the HTTP API."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    database = db.resolve() if db is not None else StoreLayout(store.resolve()).db
    try:
        check_database(database, on_network_fs=db_on_network_fs)
    except DatabaseVolumeError as exc:
        raise click.ClickException(str(exc)) from None
    types = load_types_from_here(plugins)
    settings = ControllerSettings(
        store=store.resolve(),
        db_path=database,
        environment_image=environment_image or None,
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
