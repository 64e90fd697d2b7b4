"""`LocalOptions`: how to run an embedded session; the fields ``simrun run`` gives on its
command line carry their `Flag`, the rest `simrun.local.start.ready_session` completes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import click

from simrun.config import (
    ENV_ENGINE,
    GRACE_S,
    INTAKE,
    LIMITS,
    PLUGINS,
    POSITIVE,
    PROBE,
    REDIS_URL,
    STORE,
    TOKEN,
    Flag,
    scratch_dir_flag,
)
from simrun.core.intake import InputLimits
from simrun.core.states import Limits
from simrun.core.timing import DEFAULT_GRACE_S

_RESOLVED_DIR = click.Path(file_okay=False, path_type=Path, resolve_path=True)


@dataclass(frozen=True)
class LocalOptions:
    """How to run an embedded session. ``processes`` and ``memory_gb`` are per worker
    container (None: this machine's share); ``plugins`` are extra task types loaded by the
    service and the workers; the workers serve the queues of ``images`` too, whose commands
    run inside the image through the container ``engine`` (`local.session.local_engine`)."""

    store: Annotated[Path, STORE]
    redis_url: Annotated[str | None, REDIS_URL.but(
        help="Redis to use, with a key prefix of the store [default: a private redis-server "
        "for the session].", default=None,
    )] = None  # fmt: skip
    token: Annotated[str | None, TOKEN] = None
    workers: Annotated[int, Flag(
        "workers", "Worker containers to start.", click.IntRange(1, 256)
    )] = 1  # fmt: skip
    processes: Annotated[int | None, Flag(
        "processes", "Worker processes per container [default: this machine's CPUs / "
        "workers].", click.IntRange(min=1),
    )] = None  # fmt: skip
    memory_gb: Annotated[float | None, Flag(
        "worker-memory-gb", "Memory of each worker container in GiB [default: 80% of the free "
        "memory / workers].", POSITIVE,
    )] = None  # fmt: skip
    plugins: Annotated[tuple[str, ...], PLUGINS] = ()
    limits: Annotated[Limits, LIMITS] = field(default_factory=Limits)
    grace_s: Annotated[float, GRACE_S] = DEFAULT_GRACE_S
    intake: Annotated[InputLimits, INTAKE] = field(default_factory=InputLimits)
    #: Whether a task of a key with no history probes first.
    probe: Annotated[bool, PROBE] = True
    engine: Annotated[str | None, Flag(
        "engine", "Container engine (docker, podman or a path) that runs the commands of tasks "
        "with an image inside it [default: docker, else podman, on PATH].", env=ENV_ENGINE,
        metavar="ENGINE",
    )] = None  # fmt: skip
    #: The host workers' local scratch directory (None: their default, under the logs).
    scratch_dir: Annotated[Path | None, scratch_dir_flag(
        "STORE/logs/worker-local/scratch", _RESOLVED_DIR
    )] = None  # fmt: skip
    python_path: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    #: The machine's GPUs, dealt among the workers (each sees only its own).
    gpu_ids: tuple[str, ...] = ()
    #: The images whose queues a worker container running inside the image serves
    #: (started through the ``engine``; the units of a splittable type run there): the
    #: other workers do not serve them.
    unit_images: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: Whether the runs this session finds interrupted (running in the store, their
    #: session gone) are left alone (`EmbeddedSession.held`) rather than finished too; the
    #: run ``go_on_with`` (a resumed or replayed one) is never held.
    hold_interrupted: bool = False
    go_on_with: str | None = None
