"""`WorkerSettings`: the settings of ``simrun worker``, each field with its `Flag`, from
which the command's options and a child worker's command line (`to_argv`) are made; what
the machine has (capacity, engine) is detected apart (`WorkerSettings.detect`)."""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click

from simrun import config
from simrun.config import (
    DEFAULT_REDIS_URL,
    DEFAULT_STORE,
    DIR,
    ENV_ENGINE,
    GRACE_S,
    JOB_KEY,
    JOB_KEY_FILE,
    PLUGINS,
    POSITIVE,
    PREFIX,
    REDIS_TIMEOUT_S,
    REDIS_URL,
    REDIS_WAIT_S,
    STORE,
    Flag,
    flags,
    scratch_dir_flag,
)
from simrun.core.layout import StoreLayout
from simrun.core.outage import RECONNECT_MAX_S
from simrun.core.outage import REDIS_TIMEOUT_S as DEFAULT_REDIS_TIMEOUT_S
from simrun.core.signing import JobKey, resolve_key
from simrun.core.sizing import image_queue
from simrun.core.timing import DEFAULT_GRACE_S, HEARTBEAT_S, TTL_PER_INTERVAL
from simrun.queues.keys import DEFAULT_PREFIX
from simrun.worker.capacity import Capacity, detect_capacity
from simrun.worker.engine import EngineError, find_engine
from simrun.worker.pool.output import DEFAULT_COMMAND_LOG_CAP, DEFAULT_UNIT_LOG_CAP
from simrun.worker.spool import DEFAULT_DISK_MB, DEFAULT_MEMORY_MB

F = TypeVar("F", bound=Callable[..., Any])

#: The worker's local directory when ``--local-dir`` gives none: on the container's own
#: disk, not the store.
DEFAULT_LOCAL_DIR = Path(tempfile.gettempdir()) / "simrun-worker"
DEFAULT_POLL_DELAY_S = 0.02
CGROUP_MODES = ("auto", "off")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class WorkerSettings:
    """The settings of one worker container, each flag its field's `Flag` annotation. None
    leaves a figure to the worker (detected; ``prefetch``: the slots; ``heartbeat_ttl_s``:
    `TTL_PER_INTERVAL` beats)."""

    queues: Annotated[tuple[str, ...], Flag(
        "queue", "Queue to serve (repeatable; cpu when neither --queue nor --image is given).",
        click.Choice(["cpu", "gpu"]), multiple=True,
    )] = ()  # fmt: skip
    images: Annotated[tuple[str, ...], Flag(
        "image", "Serve the queue of this task image.", multiple=True
    )] = ()  # fmt: skip
    redis_url: Annotated[str, REDIS_URL] = DEFAULT_REDIS_URL
    prefix: Annotated[str, PREFIX] = DEFAULT_PREFIX
    memory_gb: Annotated[float | None, Flag(
        "worker-memory-gb", "Memory of this worker container in GiB [default: detected].",
        POSITIVE,
    )] = None  # fmt: skip
    processes: Annotated[int | None, Flag(
        "processes", "Worker processes [default: the CPUs available].", click.IntRange(min=1)
    )] = None  # fmt: skip
    gpus: Annotated[int | None, Flag(
        "gpus", "GPUs [default: CUDA_VISIBLE_DEVICES, else nvidia-smi -L].",
        click.IntRange(min=0),
    )] = None  # fmt: skip
    worker_id: Annotated[str | None, Flag("id", "Worker id [default: host-pid-random].")] = None
    burst: Annotated[bool, Flag("burst", "Stop once the queues are empty.")] = False
    grace_s: Annotated[float, GRACE_S] = DEFAULT_GRACE_S
    plugins: Annotated[tuple[str, ...], PLUGINS] = ()
    python_path: Annotated[tuple[str, ...], Flag(
        "python-path", "Put this directory in front of the worker processes' sys.path "
        "(repeatable).", click.Path(file_okay=False), multiple=True,
    )] = ()  # fmt: skip
    poll_delay_s: Annotated[float, Flag(
        "poll-delay-s", "Seconds between two looks at an empty queue.",
        click.FloatRange(min=0.001),
    )] = DEFAULT_POLL_DELAY_S  # fmt: skip
    prefetch: Annotated[int | None, Flag(
        "prefetch", "Jobs held per queue beyond the process slots [default: the slots].",
        click.IntRange(min=0),
    )] = None  # fmt: skip
    heartbeat_s: Annotated[float, Flag(
        "heartbeat-s", "Seconds between a worker's heartbeats.", click.FloatRange(min=0.05)
    )] = HEARTBEAT_S  # fmt: skip
    heartbeat_ttl_s: Annotated[float | None, Flag(
        "heartbeat-ttl-s", "Seconds a heartbeat lives; longer than --heartbeat-s. The service "
        "gives the jobs of a worker whose heartbeat expired to others. [default: 4 x "
        "--heartbeat-s]", POSITIVE,
    )] = None  # fmt: skip
    store: Annotated[Path, STORE] = DEFAULT_STORE
    log_level: Annotated[str, Flag("log-level", "", click.Choice(LOG_LEVELS))] = "INFO"
    cgroups: Annotated[str, Flag(
        "cgroups", "auto: a memory cgroup per worker process where the kernel allows it "
        "(cgroup v2 delegated or v1's memory controller), else the process tree; off: the "
        "process tree.", click.Choice(CGROUP_MODES),
    )] = "auto"  # fmt: skip
    unit_log_cap: Annotated[int, Flag(
        "unit-log-cap", "Bytes of output one unit keeps in its log in the run's directory "
        "(its head and tail are kept, the rest counted as dropped; 0: no bound); the "
        "worker's log gets one line per unit that printed, saying where.",
        click.IntRange(min=0),
    )] = DEFAULT_UNIT_LOG_CAP  # fmt: skip
    local_dir: Annotated[Path | None, Flag(
        "local-dir", "Local directory of the worker: its status file (read by the health "
        "check) and the reports it keeps while Redis is away [default: "
        f"{DEFAULT_LOCAL_DIR}].", DIR, env="SIMRUN_WORKER_DIR",
    )] = None  # fmt: skip
    redis_retry_max_s: Annotated[float, Flag(
        "redis-retry-max-s", "Longest pause between two tries to reach Redis while it is "
        "away.", click.FloatRange(min=0.1),
    )] = RECONNECT_MAX_S  # fmt: skip
    spool_mb: Annotated[float, Flag(
        "spool-mb", "MiB of reports kept on disk while Redis is away (after 16 MiB in "
        "memory).", click.FloatRange(min=0),
    )] = DEFAULT_DISK_MB  # fmt: skip
    command_log_cap: Annotated[int, Flag(
        "command-log-cap", "Bytes of each log file of a command (its stdout and its "
        "stderr, in the task's logs/): the head and tail are kept, a line says how many "
        "bytes were dropped between them (0: no bound).", click.IntRange(min=0),
    )] = DEFAULT_COMMAND_LOG_CAP  # fmt: skip
    scratch_dir: Annotated[Path | None, scratch_dir_flag("LOCAL_DIR/scratch")] = None
    redis_wait_s: Annotated[float | None, REDIS_WAIT_S] = None
    redis_timeout_s: Annotated[float, REDIS_TIMEOUT_S] = DEFAULT_REDIS_TIMEOUT_S
    engine: Annotated[str | None, Flag(
        "engine", "Container engine (docker, podman or a path) that runs the commands of "
        "tasks of an --image queue inside their image; without it they run in this "
        "container, which is then the image's.", env=ENV_ENGINE,
    )] = None  # fmt: skip
    job_key_text: Annotated[str | None, JOB_KEY] = field(default=None, repr=False)
    job_key_file: Annotated[Path | None, JOB_KEY_FILE] = None
    #: Not flags: how long the first waiter may be passed by others (`admission.pick`),
    #: and the MiB of reports kept in memory while Redis is away.
    admission_patience_s: float = 5.0
    spool_memory_mb: float = DEFAULT_MEMORY_MB

    def __post_init__(self) -> None:
        if self.grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {self.grace_s}")
        if self.cgroups not in CGROUP_MODES:
            raise ValueError(f"cgroups must be one of {', '.join(CGROUP_MODES)}")
        if min(self.unit_log_cap, self.command_log_cap) < 0:
            raise ValueError("unit_log_cap and command_log_cap must be >= 0 bytes")
        if not self.ttl_s > self.heartbeat_s or not math.isfinite(self.ttl_s):
            raise ValueError(
                f"--heartbeat-ttl-s: {self.ttl_s:g} s is not longer than --heartbeat-s "
                f"({self.heartbeat_s:g} s): the heartbeat would expire between two beats"
            )

    def job_key(self) -> JobKey:
        """The key of this worker's jobs and reports (`simrun.core.signing.resolve_key`)."""
        return resolve_key(self.job_key_text, self.job_key_file, StoreLayout(self.store).job_key)

    @property
    def queue_names(self) -> tuple[str, ...]:
        """The logical queues of ``queues`` and ``images`` (cpu when none is given)."""
        names = [*self.queues, *(image_queue(i) for i in self.images)]
        return tuple(dict.fromkeys(names)) or ("cpu",)

    @property
    def ttl_s(self) -> float:
        """How long the heartbeat lives."""
        if self.heartbeat_ttl_s is not None:
            return self.heartbeat_ttl_s
        return TTL_PER_INTERVAL * self.heartbeat_s

    @property
    def local(self) -> Path:
        return self.local_dir or DEFAULT_LOCAL_DIR

    @property
    def scratch(self) -> Path:
        """The scratch directory that containers may share (each keeps its own id in it)."""
        return self.scratch_dir or self.local / "scratch"

    def detect(self, environ: Mapping[str, str]) -> Machine:
        """The capacity and engine where no flag gives them; `ValueError` says what is wrong."""
        try:
            capacity = detect_capacity(
                environ, memory_gb=self.memory_gb, processes=self.processes, gpus=self.gpus
            )
        except ValueError as exc:
            raise ValueError(f"capacity: {exc}") from None
        try:
            engine = None if self.engine is None else find_engine(self.engine)
        except EngineError as exc:
            raise ValueError(str(exc)) from None
        return Machine(capacity, engine)

    def to_argv(self) -> list[str]:
        """The arguments of ``simrun worker`` that give these settings. Defaults are
        written too (a flag left out would be read from the child's environment:
        ``REDIS_URL``, ``SIMRUN_STORE``); a None or False one is left out."""
        argv: list[str] = []
        for name, spec in flags(WorkerSettings).items():
            assert isinstance(spec, Flag)  # no `Group` here
            value = getattr(self, name)
            if value is None or value is False or spec.secret:
                continue
            flag = f"--{spec.name}"
            if value is True:
                argv.append(flag)
            elif isinstance(value, tuple | list):
                argv += [a for item in value for a in (flag, str(item))]
            else:
                argv += [flag, repr(value) if isinstance(value, float) else str(value)]
        return argv


@dataclass(frozen=True)
class Machine:
    """What `WorkerSettings.detect` found: the capacity and the engine's executable."""

    capacity: Capacity
    engine: str | None = None


def option(name: str) -> Callable[[F], F]:
    """The click option of setting ``name``, as ``simrun worker`` has it."""
    return config.option(WorkerSettings, name)


def worker_argv(settings: WorkerSettings, python: str = sys.executable) -> list[str]:
    """The command line of a worker container as a child process of ``python``."""
    return [python, "-m", "simrun.cli", "worker", *settings.to_argv()]
