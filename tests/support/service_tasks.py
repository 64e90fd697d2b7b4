"""Task types for the service's end-to-end tests (loaded with ``--plugins`` by the workers
and by the controller, never installed as entry points).

``svc-work`` is splittable with a merge. Each call of its ``compute_unit`` first appends a
line to ``calls-<index>.log`` in the task's output directory (so tests count how often a
unit was computed, killed attempts included), then sleeps, hogs memory, fails on purpose,
and at last writes ``unit-<index>.json`` atomically. Its merge writes ``merged.json``: the
indices that have a result file.

``svc-roomy`` is ``svc-work`` with a larger hint (1 GiB per process).

``svc-parts`` is ``svc-work`` whose units' outputs are declared per index
(`simrun.plugins.UnitOutputs`: ``unit-<index>.json``, ``units`` only counts them): a later
run with more or fewer units takes the units an earlier one computed.

``svc-count`` is splittable without a merge: each computation of a unit appends a line to
one log when it begins and another when it completes, so tests count both per index.
"""

from __future__ import annotations

import builtins
import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType, UnitOutputs

MIB = 2**20


class WorkSettings(BaseModel):
    """What the units of a test task do."""

    units: int = 8
    seconds: float = 0.0  # sleep of each unit
    hog_mb: int = 0  # memory a unit allocates and touches
    hog_indices: list[int] = []  # the units that hog (all when empty)
    fail_flag: str = ""  # while this file exists, the units in fail_indices raise
    fail_indices: list[int] = []
    fail_exception: str = "RuntimeError"  # the builtin exception type a failing unit raises
    say_indices: list[int] = []  # the units that print a line (to their unit log)
    say_before: bool = False  # those units also print a line before their sleep
    tag: str = ""  # a cost setting: runs with another tag learn apart


def count_units(settings: WorkSettings) -> int:
    return settings.units


def compute_unit(settings: WorkSettings, index: int, paths: TaskPaths) -> None:
    start = time.time()
    paths.out.mkdir(parents=True, exist_ok=True)
    with (paths.out / f"calls-{index}.log").open("a") as fh:
        fh.write(f"{os.getpid()} {start}\n")
    if settings.say_before and index in settings.say_indices:
        print(f"unit {index} starts in process {os.getpid()}", flush=True)
    time.sleep(settings.seconds)
    if index in settings.say_indices:
        print(f"unit {index} says hello from process {os.getpid()}", flush=True)
    if settings.hog_mb and (not settings.hog_indices or index in settings.hog_indices):
        held = bytearray(settings.hog_mb * MIB)
        for offset in range(0, len(held), 4096):
            held[offset] = 1
        time.sleep(0.2)  # long enough for the sampler to see it
        del held
    if settings.fail_flag and index in settings.fail_indices and Path(settings.fail_flag).exists():
        error: type[Exception] = getattr(builtins, settings.fail_exception)
        raise error(f"unit {index} fails on purpose while {settings.fail_flag} exists")
    record = {
        "index": index,
        "pid": os.getpid(),
        "start": start,
        "end": time.time(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    tmp = paths.out / f".unit-{index}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(paths.out / f"unit-{index}.json")


def merge(settings: WorkSettings, paths: TaskPaths) -> None:
    found = sorted(int(p.stem.split("-")[1]) for p in paths.out.glob("unit-*.json"))
    (paths.out / "merged.json").write_text(json.dumps(found))


def _type(
    name: str, settings: type[BaseModel], functions: str, per_worker_gb: float = 0.25, **more: Any
) -> TaskType:
    """A splittable type of this module whose ``count_units`` and ``compute_unit`` are the
    functions of those names with the prefix ``functions``, with a hint of
    ``per_worker_gb`` per process."""
    refs = {role: f"{__name__}:{functions}{role}" for role in ("count_units", "compute_unit")}
    hint = ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=per_worker_gb)
    return TaskType(name=name, settings=settings, hint=hint, **refs, **more)


WORK = _type(
    "svc-work",
    WorkSettings,
    "",
    merge=f"{__name__}:merge",
    cost_setting="tag",
    description="units that sleep, hog memory or fail, for the service's tests",
)

#: ``svc-work`` with a hint of 1 GiB per process, four times the least a learned request
#: asks (`simrun.resources.MIN_MEMORY_PER_WORKER_GB`): a request learned from its units
#: tells itself apart from the hint (the probe's tests).
ROOMY = _type(
    "svc-roomy",
    WorkSettings,
    "",
    per_worker_gb=1.0,
    merge=f"{__name__}:merge",
    cost_setting="tag",
    description="svc-work whose hint is four times what a learned request asks",
)


class PartsSettings(WorkSettings):
    """`WorkSettings` whose units write ``unit-<index>.json`` each, whatever ``units``."""

    simrun_unit_outputs: ClassVar[UnitOutputs] = UnitOutputs(
        files=("unit-{index}.json",), count_settings=("units",)
    )


PARTS = _type(
    "svc-parts",
    PartsSettings,
    "",
    merge=f"{__name__}:merge",
    description="svc-work whose units may be reused one by one",
)


class CountSettings(BaseModel):
    """Units that each take ``seconds``."""

    units: int = 8
    seconds: float = 0.0


def count_count_units(settings: CountSettings) -> int:
    return settings.units


#: The log of ``svc-count``, in the task's output directory: one line per unit computation
#: begun ("start INDEX PID") and one per computation completed ("end INDEX PID").
COUNT_LOG = "computed.log"


def _log_line(paths: TaskPaths, text: str) -> None:
    # One short write with O_APPEND: lines of concurrent processes never interleave.
    paths.out.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.out / COUNT_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def count_compute_unit(settings: CountSettings, index: int, paths: TaskPaths) -> None:
    _log_line(paths, f"start {index} {os.getpid()}")
    time.sleep(settings.seconds)
    _log_line(paths, f"end {index} {os.getpid()}")


COUNT = _type(
    "svc-count",
    CountSettings,
    "count_",
    description="units that log when each computation of them begins and ends",
)

REFS = (f"{__name__}:WORK", f"{__name__}:COUNT", f"{__name__}:ROOMY", f"{__name__}:PARTS")
