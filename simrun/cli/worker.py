"""``simrun worker``: run one worker container (wired into the ``simrun`` command as
``worker``; also ``python -m simrun.cli worker``).

Its parameters are `simrun.worker.container.WorkerFlags` (which also writes them back as a
command line for the processes that start workers); the options shared with other commands
are `simrun.cli.options`'.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import click
from redis.exceptions import RedisError

from simrun.cli.options import (
    GRACE_S,
    HEARTBEAT_INTERVAL_S,
    PLUGINS,
    POSITIVE,
    PREFIX,
    REDIS_TIMEOUT_S,
    REDIS_URL,
    REDIS_WAIT_S,
    STORE,
    WORKER_HEARTBEAT_TTL_S,
    container_processes_option,
    scratch_dir_option,
)
from simrun.config import ENV_ENGINE, ENV_WORKER_DIR, redact_url
from simrun.core.outage import RECONNECT_MAX_S
from simrun.queues.connect import RedisUnusable
from simrun.worker.container import (
    CGROUP_MODES,
    DEFAULT_COMMAND_LOG_CAP,
    DEFAULT_LOCAL_DIR,
    DEFAULT_POLL_DELAY_S,
    DEFAULT_SPOOL_MB,
    DEFAULT_UNIT_LOG_CAP,
    WorkerFlags,
    run_container,
)
from simrun.worker.pool.processes import PoolError

QUEUE_HELP = "Queue to serve (repeatable; cpu when neither --queue nor --image is given)."
GPUS_HELP = "GPUs [default: CUDA_VISIBLE_DEVICES, else nvidia-smi -L]."
PREFETCH_HELP = "Jobs held per queue beyond the process slots [default: the slots]."
PYTHON_PATH_HELP = "Put this directory in front of the worker processes' sys.path (repeatable)."
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOCAL_DIR_HELP = (
    "Local directory of the worker: its status file (read by the health check) and the "
    f"reports it keeps while Redis is away [default: {DEFAULT_LOCAL_DIR}]."
)
ENGINE_HELP = (
    "Container engine (docker, podman or a path) that runs the commands of tasks of an "
    "--image queue inside their image; without it they run in this container, which is "
    "then the image's."
)
OLD_MEMORY_GB = (
    "--memory-gb is now --worker-memory-gb on `simrun worker` (the memory of the container, "
    "as on run/submit/scale); give that"
)


class _OldFlag(click.ClickException):
    """A flag given by a former name: one line, exit status 2 (as a usage error)."""

    exit_code = 2


def refuse_old_memory_gb(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """The former spelling of ``--worker-memory-gb`` errors with one line naming the new
    (exit status 2, as a usage error, without the usage lines)."""
    if value is not None:
        raise _OldFlag(OLD_MEMORY_GB)


SPOOL_HELP = "MiB of reports kept on disk while Redis is away (after 16 MiB in memory)."


@click.command("worker")
@click.option(
    "--queue", "queues", multiple=True, type=click.Choice(["cpu", "gpu"]), help=QUEUE_HELP
)
@click.option("--image", "images", multiple=True, help="Serve the queue of this task image.")
@REDIS_URL
@PREFIX
@click.option(
    "--worker-memory-gb", "memory_gb", type=POSITIVE, default=None,
    help="Memory of this worker container in GiB [default: detected].",
)  # fmt: skip
@click.option(
    "--memory-gb", "old_memory_gb", type=POSITIVE, default=None, hidden=True,
    expose_value=False, callback=refuse_old_memory_gb, is_eager=True,
)  # fmt: skip
@container_processes_option("Worker processes [default: the CPUs available].")
@click.option("--gpus", type=click.IntRange(min=0), default=None, help=GPUS_HELP)
@click.option("--id", "worker_id", default=None, help="Worker id [default: host-pid-random].")
@click.option("--burst", is_flag=True, help="Stop once the queues are empty.")
@GRACE_S
@PLUGINS
@click.option(
    "--python-path", multiple=True, type=click.Path(file_okay=False), help=PYTHON_PATH_HELP
)
@click.option(
    "--poll-delay-s", type=click.FloatRange(min=0.001), default=DEFAULT_POLL_DELAY_S,
    show_default=True, help="Seconds between two looks at an empty queue.",
)  # fmt: skip
@click.option("--prefetch", type=click.IntRange(min=0), default=None, help=PREFETCH_HELP)
@HEARTBEAT_INTERVAL_S
@WORKER_HEARTBEAT_TTL_S
@STORE
@click.option("--log-level", default="INFO", show_default=True, type=click.Choice(LOG_LEVELS))
@click.option(
    "--cgroups", type=click.Choice(CGROUP_MODES), default="auto", show_default=True,
    help="auto: a memory cgroup per worker process where the kernel allows it (cgroup v2 "
    "delegated or v1's memory controller), else the process tree; off: the process tree.",
)  # fmt: skip
@click.option(
    "--unit-log-cap", type=click.IntRange(min=0), default=DEFAULT_UNIT_LOG_CAP,
    show_default=True, help="Bytes of output one unit keeps in its log in the run's "
    "directory (its head and tail are kept, the rest counted as dropped; 0: no bound); the "
    "worker's log gets one line per unit that printed, saying where.",
)  # fmt: skip
@click.option(
    "--local-dir", type=click.Path(file_okay=False, path_type=Path), envvar=ENV_WORKER_DIR,
    show_envvar=True, default=None, help=LOCAL_DIR_HELP,
)  # fmt: skip
@click.option(
    "--redis-retry-max-s", type=click.FloatRange(min=0.1), default=RECONNECT_MAX_S,
    show_default=True, help="Longest pause between two tries to reach Redis while it is away.",
)  # fmt: skip
@click.option(
    "--spool-mb", type=click.FloatRange(min=0), default=DEFAULT_SPOOL_MB, show_default=True,
    help=SPOOL_HELP,
)  # fmt: skip
@click.option(
    "--command-log-cap", type=click.IntRange(min=0), default=DEFAULT_COMMAND_LOG_CAP,
    show_default=True, help="Bytes of each log file of a command (its stdout and its "
    "stderr, in the task's logs/): the head and tail are kept, a line says how many bytes "
    "were dropped between them (0: no bound).",
)  # fmt: skip
@scratch_dir_option("LOCAL_DIR/scratch")
@REDIS_WAIT_S
@REDIS_TIMEOUT_S
@click.option(
    "--engine", envvar=ENV_ENGINE, show_envvar=True, default=None, help=ENGINE_HELP,
)  # fmt: skip
def worker(**params: Any) -> None:
    """Run a worker container: take jobs from the queues, run them in a pool of worker
    processes within the container's memory, and report every unit."""
    flags = WorkerFlags(**params)
    try:
        # The environment gives the GPUs a container may use (CUDA_VISIBLE_DEVICES).
        options = flags.options(os.environ)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    logging.basicConfig(
        level=getattr(logging, flags.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if flags.log_level != "DEBUG":
        logging.getLogger("arq").setLevel(logging.WARNING)
    try:
        run_container(options)
    except (PoolError, RedisUnusable) as exc:
        raise click.ClickException(str(exc)) from None
    except (RedisError, OSError) as exc:
        where = redact_url(options.redis_url)
        raise click.ClickException(f"cannot reach Redis at {where}: {exc}") from None
