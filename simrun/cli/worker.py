"""``simrun worker``: run one worker container (wired into the ``simrun`` command as
``worker``; also ``python -m simrun.worker``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
from redis.exceptions import RedisError

from simrun.config import load_config
from simrun.core.timing import HEARTBEAT_S, TTL_PER_INTERVAL
from simrun.queues import DEFAULT_PREFIX
from simrun.worker.capacity import detect_capacity
from simrun.worker.container import WorkerOptions, queues_for, run_container
from simrun.worker.pool.processes import PoolError

__all__ = ["worker"]

#: A heartbeat lives this many intervals unless --heartbeat-ttl-s says otherwise.


@click.command("worker")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    type=click.Choice(["cpu", "gpu"]),
    help="Queue to serve (repeatable; cpu when neither --queue nor --image is given).",
)
@click.option("--image", "images", multiple=True, help="Serve the queue of this task image.")
@click.option("--redis-url", default=None, help="Redis to use [default: REDIS_URL or local].")
@click.option("--prefix", default=DEFAULT_PREFIX, show_default=True, help="Redis key prefix.")
@click.option(
    "--memory-gb",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Memory of the container in GiB [default: detected].",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes [default: the CPUs available].",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=0),
    default=None,
    help="GPUs [default: CUDA_VISIBLE_DEVICES, else nvidia-smi -L].",
)
@click.option("--id", "worker_id", default=None, help="Worker id [default: host-pid-random].")
@click.option("--burst", is_flag=True, help="Stop once the queues are empty.")
@click.option(
    "--grace-s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="On SIGTERM, seconds running jobs get to finish before they are handed back.",
)
@click.option(
    "--plugins",
    "plugins",
    multiple=True,
    metavar="MODULE:ATTR",
    help="Also load this TaskType (repeatable), besides the installed entry points.",
)
@click.option(
    "--python-path",
    "python_path",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Put this directory in front of the worker processes' sys.path (repeatable).",
)
@click.option(
    "--poll-delay-s",
    type=click.FloatRange(min=0.001),
    default=0.02,
    show_default=True,
    help="Seconds between two looks at an empty queue.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    default=None,
    help="Jobs held per queue beyond the process slots [default: the slots].",
)
@click.option(
    "--heartbeat-s",
    type=click.FloatRange(min=0.05),
    default=HEARTBEAT_S,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option(
    "--heartbeat-ttl-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a heartbeat lives; longer than --heartbeat-s. The service gives the jobs "
    "of a worker whose heartbeat expired to others. [default: 4 x --heartbeat-s]",
)
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The run store [default: SIMRUN_STORE]; jobs carry their own paths.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
def worker(
    queues: tuple[str, ...],
    images: tuple[str, ...],
    redis_url: str | None,
    prefix: str,
    memory_gb: float | None,
    processes: int | None,
    gpus: int | None,
    worker_id: str | None,
    burst: bool,
    grace_s: float,
    plugins: tuple[str, ...],
    python_path: tuple[str, ...],
    poll_delay_s: float,
    prefetch: int | None,
    heartbeat_s: float,
    heartbeat_ttl_s: float | None,
    store: Path | None,
    log_level: str,
) -> None:
    """Run a worker container: take jobs from the queues, run them in a pool of worker
    processes within the container's memory, and report every unit."""
    ttl_s = TTL_PER_INTERVAL * heartbeat_s if heartbeat_ttl_s is None else heartbeat_ttl_s
    if not ttl_s > heartbeat_s:
        raise click.BadParameter(
            f"{ttl_s:g} s is not longer than --heartbeat-s ({heartbeat_s:g} s): the heartbeat "
            "would expire between two beats",
            param_hint="--heartbeat-ttl-s",
        )
    logging.basicConfig(
        level=getattr(logging, log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if log_level != "DEBUG":
        logging.getLogger("arq").setLevel(logging.WARNING)
    config = load_config()
    try:
        capacity = detect_capacity(os.environ, memory_gb=memory_gb, processes=processes, gpus=gpus)
    except ValueError as exc:
        raise click.UsageError(f"capacity: {exc}") from None
    options = WorkerOptions(
        redis_url=redis_url or config.redis_url_or_default,
        capacity=capacity,
        queues=queues_for(queues, images),
        prefix=prefix,
        worker_id=worker_id,
        plugins=plugins,
        python_path=tuple(str(Path(p).resolve()) for p in python_path),
        burst=burst,
        grace_s=grace_s,
        poll_delay_s=poll_delay_s,
        prefetch=prefetch,
        heartbeat_s=heartbeat_s,
        heartbeat_ttl_s=ttl_s,
        store=store or config.store,
    )
    try:
        run_container(options)
    except PoolError as exc:
        raise click.ClickException(str(exc)) from None
    except (RedisError, OSError) as exc:
        raise click.ClickException(f"cannot reach Redis at {options.redis_url}: {exc}") from None
