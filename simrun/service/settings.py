"""`ControllerSettings`: how the controller runs; the fields given on the command line carry
their `Flag`, from which ``simrun service`` makes its options."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import click

from simrun.config import (
    INTAKE,
    JOB_KEY,
    JOB_KEY_FILE,
    LIMITS,
    POSITIVE,
    PREFIX,
    PROBE,
    REDIS_TIMEOUT_S,
    REDIS_URL,
    REDIS_WAIT_S,
    STORE,
    Flag,
)
from simrun.core import sizing
from simrun.core.intake import InputLimits
from simrun.core.layout import StoreLayout
from simrun.core.outage import REDIS_TIMEOUT_S as DEFAULT_REDIS_TIMEOUT_S
from simrun.core.signing import JobKey, resolve_key
from simrun.core.states import Limits
from simrun.core.timing import HEARTBEAT_TTL_S
from simrun.queues.connect import RedisTimeouts
from simrun.queues.keys import DEFAULT_PREFIX

_RESOLVED = click.Path(file_okay=False, path_type=Path, resolve_path=True)


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller runs (times in seconds)."""

    store: Annotated[Path, STORE.but(type=_RESOLVED)]
    redis_url: Annotated[str, REDIS_URL]
    prefix: Annotated[str, PREFIX] = DEFAULT_PREFIX
    #: The SQLite file (None: ``STORE/simrun.db``), on a local volume.
    db_path: Annotated[Path | None, Flag(
        "db", "The service's SQLite file, on a local volume [default: STORE/simrun.db]. The "
        "store is shared with the workers, often over a network file system, where SQLite's "
        "locks may not hold.", click.Path(dir_okay=False, path_type=Path, resolve_path=True),
        env="SIMRUN_DB",
    )] = None  # fmt: skip
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
    limits: Annotated[Limits, LIMITS] = field(default_factory=Limits)
    #: What one submission may ask: body, workflow, files, tasks, units.
    intake: Annotated[InputLimits, INTAKE] = field(default_factory=InputLimits)
    #: How often the jobs in flight are compared with what Redis holds.
    reconcile_s: float = 5.0
    heartbeat_ttl_s: Annotated[float, Flag(
        "heartbeat-ttl-s", "Seconds a worker's heartbeat lives; at least the workers' "
        "--heartbeat-ttl-s. A job that no live worker lists for longer is dispatched again.",
        POSITIVE,
    )] = HEARTBEAT_TTL_S  # fmt: skip
    probe: Annotated[bool, PROBE] = True
    #: Bound of one unit on a worker (None: none).
    unit_timeout_s: float | None = None
    group: str = "simrun-service"
    consumer: str = "controller"
    redis_wait_s: Annotated[float | None, REDIS_WAIT_S] = None
    redis_timeout_s: Annotated[float, REDIS_TIMEOUT_S] = DEFAULT_REDIS_TIMEOUT_S
    environment_image: Annotated[str | None, Flag(
        "environment-image", "The environment image of a run whose workflow names none (its "
        "`image:`): its tasks whose type has no image go to that image's queue [default: "
        "none, the cpu and gpu queues].", env="SIMRUN_ENVIRONMENT_IMAGE",
    )] = None  # fmt: skip
    job_key_text: Annotated[str | None, JOB_KEY] = field(default=None, repr=False)
    job_key_file: Annotated[Path | None, JOB_KEY_FILE] = None

    def job_key(self) -> JobKey:
        """The key of this service's jobs and reports (`simrun.core.signing.resolve_key`)."""
        return resolve_key(self.job_key_text, self.job_key_file, StoreLayout(self.store).job_key)

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
