"""``simrun worker``: run one worker container; its options are the flags of
`simrun.worker.settings.WorkerSettings`."""

from __future__ import annotations

import logging
import os

import click
from redis.exceptions import RedisError

from simrun.config import click_options, redact_url
from simrun.queues.connect import RedisUnusable
from simrun.worker.container import run_container
from simrun.worker.pool.processes import PoolError
from simrun.worker.settings import WorkerSettings


@click.command("worker")
@click_options(WorkerSettings)
def worker(settings: WorkerSettings) -> None:
    """Run a worker container: take jobs from the queues, run them, report every unit."""
    try:
        # The environment gives the GPUs a container may use (CUDA_VISIBLE_DEVICES).
        machine = settings.detect(os.environ)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    logging.basicConfig(
        level=getattr(logging, settings.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if settings.log_level != "DEBUG":
        logging.getLogger("arq").setLevel(logging.WARNING)
    try:
        run_container(settings, machine)
    except (PoolError, RedisUnusable) as exc:
        raise click.ClickException(str(exc)) from None
    except (RedisError, OSError) as exc:
        where = redact_url(settings.redis_url)
        raise click.ClickException(f"cannot reach Redis at {where}: {exc}") from None
