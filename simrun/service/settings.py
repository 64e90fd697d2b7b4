"""`ControllerSettings`: how the controller runs, declared once; the fields given on the
command line carry their `Option` (flag, environment variable, help), from which
`click_options` makes the options of ``simrun service``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from simrun.config import (
    DEFAULT_REDIS_URL,
    DEFAULT_STORE,
    ENV_DB,
    ENV_ENVIRONMENT_IMAGE,
    ENV_REDIS_URL,
    ENV_STORE,
)
from simrun.core import sizing
from simrun.core.intake import InputLimits
from simrun.core.layout import StoreLayout
from simrun.core.outage import REDIS_TIMEOUT_S
from simrun.core.states import Limits
from simrun.core.timing import HEARTBEAT_TTL_S
from simrun.queues.connect import RedisTimeouts
from simrun.queues.keys import DEFAULT_PREFIX

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Option:
    """How a setting is given on the command line; ``default`` is the command line's when
    the field has none."""

    flag: str
    help: str
    env: str | None = None
    type: Any = None
    default: Any = None


def _opt(flag: str, help: str, **more: Any) -> dict[str, Option]:
    """The metadata of a field given on the command line."""
    return {"option": Option(flag, help, **more)}


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller runs (times in seconds)."""

    store: Path = field(
        metadata=_opt(
            "--store",
            "The run store: runs, their outputs and logs, and what is learned.",
            env=ENV_STORE,
            type=click.Path(file_okay=False, path_type=Path),
            default=DEFAULT_STORE,
        )
    )
    redis_url: str = field(
        metadata=_opt("--redis-url", "Redis to use.", env=ENV_REDIS_URL, default=DEFAULT_REDIS_URL)
    )
    prefix: str = field(default=DEFAULT_PREFIX, metadata=_opt("--prefix", "Redis key prefix."))
    #: The SQLite file (None: ``STORE/simrun.db``), on a local volume.
    db_path: Path | None = field(
        default=None,
        metadata=_opt(
            "--db",
            "The service's SQLite file, on a local volume [default: STORE/simrun.db]. The "
            "store is shared with the workers, often over a network file system, where "
            "SQLite's locks may not hold.",
            env=ENV_DB,
            type=click.Path(dir_okay=False, path_type=Path),
        ),
    )
    #: Pause of the loop when a step found nothing to do.
    poll_s: float = 0.1
    #: Reports read per batch, and batches per step at most.
    report_batch: int = 500
    report_batches: int = 20
    #: Jobs in flight per queue at most; the rest of the units wait as pending.
    window_jobs: int = 64
    #: Units one task sends out in one step at most (at least one job).
    dispatch_units: int = 4000
    enqueue_concurrency: int = 32
    target_job_s: float = sizing.DEFAULT_TARGET_JOB_S
    max_chunk: int = sizing.DEFAULT_MAX_CHUNK
    limits: Limits = field(default_factory=Limits)
    #: What one submission may ask: body, workflow, files, tasks, units.
    intake: InputLimits = field(default_factory=InputLimits)
    #: How often the jobs in flight are compared with what Redis holds.
    reconcile_s: float = 5.0
    heartbeat_ttl_s: float = field(
        default=HEARTBEAT_TTL_S,
        metadata=_opt(
            "--heartbeat-ttl-s",
            "Seconds a worker's heartbeat lives; at least the workers' --heartbeat-ttl-s. A "
            "job that no live worker lists for longer is dispatched again.",
            type=click.FloatRange(min=0, min_open=True),
        ),
    )
    probe: bool = field(
        default=True,
        metadata=_opt(
            "--probe/--no-probe",
            "Send a small probe of a task whose memory is not learned yet ahead of its other "
            "units, which then get the learned memory (--no-probe: every unit at once, with "
            "the plugin's hint).",
        ),
    )
    #: Bound of one unit on a worker (None: none).
    unit_timeout_s: float | None = None
    group: str = "simrun-service"
    consumer: str = "controller"
    redis_wait_s: float | None = field(
        default=None,
        metadata=_opt(
            "--redis-wait-s",
            "Seconds to wait for Redis at start while it is not reachable (refused, timed "
            "out, a name that does not resolve yet) [default: for ever; 0: fail at once]. Bad "
            "credentials or a bad URL fail at once whatever this says.",
            type=click.FloatRange(min=0),
        ),
    )
    redis_timeout_s: float = field(
        default=REDIS_TIMEOUT_S,
        metadata=_opt(
            "--redis-timeout-s",
            "Seconds one Redis call or connection attempt may take before it fails: how soon "
            "a Redis that stopped answering without closing its connections is noticed.",
            type=click.FloatRange(min=0.1),
        ),
    )
    environment_image: str | None = field(
        default=None,
        metadata=_opt(
            "--environment-image",
            "The environment image of a run whose workflow names none (its `image:`): its "
            "tasks whose type has no image go to that image's queue [default: none, the cpu "
            "and gpu queues].",
            env=ENV_ENVIRONMENT_IMAGE,
        ),
    )

    @property
    def redis_timeouts(self) -> RedisTimeouts:
        return RedisTimeouts(connect_s=self.redis_timeout_s, socket_s=self.redis_timeout_s)

    @property
    def database(self) -> Path:
        return self.db_path if self.db_path is not None else StoreLayout(self.store).db

    def __post_init__(self) -> None:
        counts = (self.window_jobs, self.report_batch, self.report_batches, self.dispatch_units)
        if min(counts) < 1:
            raise ValueError(
                "window_jobs, report_batch, report_batches and dispatch_units must be >= 1"
            )
        times = (self.poll_s, self.reconcile_s, self.target_job_s, self.heartbeat_ttl_s)
        if not all(t > 0 for t in times):
            raise ValueError("poll_s, reconcile_s, target_job_s and heartbeat_ttl_s must be > 0")


def _options() -> list[tuple[str, Option, Any]]:
    """The fields of `ControllerSettings` with an `Option`, and their command-line default."""
    found = []
    for f in dataclasses.fields(ControllerSettings):
        if "option" in f.metadata:
            o: Option = f.metadata["option"]
            default = o.default if f.default is dataclasses.MISSING else f.default
            found.append((f.name, o, default))
    return found


def click_options(f: F) -> F:
    """The options of `ControllerSettings` on a click command, which gets them as one
    parameter, ``settings`` (paths resolved, an empty image for none)."""
    names = [name for name, _, _ in _options()]

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        db = values["db_path"]
        values.update(
            store=values["store"].resolve(),
            db_path=None if db is None else db.resolve(),
            environment_image=values["environment_image"] or None,
        )
        return f(*args, settings=ControllerSettings(**values), **kwargs)

    decorated: Callable[..., Any] = wrapper
    for name, o, default in reversed(_options()):
        decorated = click.option(
            o.flag, name, type=o.type, default=default, envvar=o.env, show_envvar=o.env is not None,
            show_default=default is not None, help=o.help,
        )(decorated)  # fmt: skip
    return decorated  # type: ignore[return-value]
