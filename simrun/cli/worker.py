"""``simrun worker``: run one worker container; its options are the flags of
`simrun.worker.settings.WorkerSettings`."""

from __future__ import annotations

import logging
import os
from typing import Any

import click
from redis.exceptions import RedisError

from simrun.config import redact_url
from simrun.queues.connect import RedisUnusable
from simrun.worker.container import run_container
from simrun.worker.pool.processes import PoolError
from simrun.worker.settings import WorkerSettings, click_options

OLD_MEMORY_GB = (
    "--memory-gb is now --worker-memory-gb on `simrun worker` (the memory of the container, "
    "as on run/submit/scale); give that"
)


class _OldFlag(click.ClickException):
    """A flag given by a former name: one line, exit status 2 (as a usage error)."""

    exit_code = 2


def refuse_old_memory_gb(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """The former spelling of ``--worker-memory-gb`` errors with one line naming the new."""
    if value is not None:
        raise _OldFlag(OLD_MEMORY_GB)


@click.command("worker")
@click_options
@click.option(
    "--memory-gb", "old_memory_gb", type=float, default=None, hidden=True,
    expose_value=False, callback=refuse_old_memory_gb, is_eager=True,
)  # fmt: skip
def worker(**params: Any) -> None:
    """Run a worker container: take jobs from the queues, run them, report every unit."""
    try:
        settings = WorkerSettings(**params)
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
