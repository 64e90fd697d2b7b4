"""`ControllerSettings`: how the controller runs (times in seconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simrun.core import sizing
from simrun.core.intake import InputLimits
from simrun.core.layout import StoreLayout
from simrun.core.outage import REDIS_TIMEOUT_S
from simrun.core.states import Limits
from simrun.core.timing import HEARTBEAT_TTL_S
from simrun.queues.connect import RedisTimeouts
from simrun.queues.keys import DEFAULT_PREFIX


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller runs. ``store`` is the run store (STORE); the SQLite file is
    ``db_path`` (``STORE/simrun.db`` by default, on a local volume). Times in seconds."""

    store: Path
    redis_url: str
    prefix: str = DEFAULT_PREFIX
    db_path: Path | None = None
    #: Pause of the loop when a step found nothing to do.
    poll_s: float = 0.1
    #: Reports read per batch, and batches per step at most.
    report_batch: int = 500
    report_batches: int = 20
    #: Jobs in flight per queue at most; the rest of the units wait as pending.
    window_jobs: int = 64
    #: Units one task sends out in one step at most (at least one job): the first jobs
    #: leave sooner than if the whole window were stored and enqueued at once.
    dispatch_units: int = 4000
    enqueue_concurrency: int = 32
    target_job_s: float = sizing.DEFAULT_TARGET_JOB_S
    max_chunk: int = sizing.DEFAULT_MAX_CHUNK
    limits: Limits = field(default_factory=Limits)
    #: What one submission may ask: body, workflow, files, tasks, units (`InputLimits`).
    intake: InputLimits = field(default_factory=InputLimits)
    #: How often the jobs in flight are compared with what Redis holds.
    reconcile_s: float = 5.0
    #: How long a worker's heartbeat lives (as ``simrun worker --heartbeat-ttl-s``): a job
    #: arq holds in progress that no live worker lists for longer is dispatched again.
    heartbeat_ttl_s: float = HEARTBEAT_TTL_S
    #: Whether a task of a key with no history sends a probe first (`sizing.probe_units`)
    #: and holds its other units until the probe reported: ``--no-probe`` turns it off.
    probe: bool = True
    #: Bound of one unit on a worker (None: none).
    unit_timeout_s: float | None = None
    group: str = "simrun-service"
    consumer: str = "controller"
    #: How long the loop waits for Redis when it first connects (None: for ever, while the
    #: API answers from SQLite; 0: one try): ``--redis-wait-s``.
    redis_wait_s: float | None = None
    #: Bound of one Redis call and connection attempt: ``--redis-timeout-s``.
    redis_timeout_s: float = REDIS_TIMEOUT_S
    #: The environment image of a run whose workflow names none (``--environment-image``):
    #: its tasks without an image of their own go to that image's queue. None: the cpu and
    #: gpu queues, whose workers' image is the environment.
    environment_image: str | None = None

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
