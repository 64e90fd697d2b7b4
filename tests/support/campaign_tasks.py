"""The task type of the fault campaign (tests/e2e/test_fault_campaign.py): ``fault-unit``,
loaded with ``--plugins`` by the campaign's service and workers.

Every computation of a unit leaves a trace the campaign counts:

- ``unit-<index>.out`` in the task's output directory, written atomically (a temporary
  file renamed over it): the unit's output, whose content is its key ``run/task/index``;
- one line ``done <key> <pgid> <pid>`` appended to ``completions.log`` (one ``write`` with
  ``O_APPEND``: lines of concurrent processes never interleave) once the output is in
  place. ``pgid`` is the process group of the worker container that computed it (each
  campaign worker leads its own), so the campaign tells which worker did what;
- the merge appends ``merge <run>/<task> <pgid> <pid>`` to the same log when it begins,
  so the log's order tells whether a computation ended after the merge read the outputs.

A unit sleeps ``seconds`` first and, when it is one of ``hog_indices`` (all units when the
list is empty and ``hog_mb`` is set), touches ``hog_mb`` MiB and holds it long enough for
the worker's memory sampler to see it. The merge writes ``merged.json``: the keys of the
output files, sorted, each as often as it was found.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType

MIB = 2**20
#: The shared log of completed computations, in the task's output directory.
COMPLETIONS = "completions.log"
#: The merge's output: the unit keys found, sorted.
MERGED = "merged.json"
#: What a unit asks for per process (GiB): a hog unit above it is killed for memory by the
#: worker's sampler, and its retry asks for twice the limit it was killed under.
REQUEST_GB = 0.25


class FaultSettings(BaseModel):
    """What the units of a campaign task do."""

    units: int = 40
    seconds: float = 0.05
    hog_mb: int = 0
    hog_indices: list[int] = []
    tag: str = ""  # a cost setting: campaign runs of another tag learn apart


def unit_key(paths: TaskPaths, index: int) -> str:
    """``run/task/index``: the unit's key, from where its output goes."""
    return f"{paths.run_dir.name}/{paths.task_dir.name}/{index}"


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def count_units(settings: FaultSettings) -> int:
    return settings.units


def compute_unit(settings: FaultSettings, index: int, paths: TaskPaths) -> None:
    time.sleep(settings.seconds)
    if settings.hog_mb and (not settings.hog_indices or index in settings.hog_indices):
        held = bytearray(settings.hog_mb * MIB)
        for offset in range(0, len(held), 4096):
            held[offset] = 1
        time.sleep(0.25)  # long enough for the 20 ms sampler to see it
        del held
    key = unit_key(paths, index)
    paths.out.mkdir(parents=True, exist_ok=True)
    tmp = paths.out / f".unit-{index}.{os.getpid()}.tmp"
    tmp.write_text(key)
    tmp.replace(paths.out / f"unit-{index}.out")
    _append(paths.out / COMPLETIONS, f"done {key} {os.getpgid(0)} {os.getpid()}")


def merge(settings: FaultSettings, paths: TaskPaths) -> None:
    task = f"{paths.run_dir.name}/{paths.task_dir.name}"
    _append(paths.out / COMPLETIONS, f"merge {task} {os.getpgid(0)} {os.getpid()}")
    keys = sorted(p.read_text() for p in paths.out.glob("unit-*.out"))
    (paths.out / MERGED).write_text(json.dumps(keys))


FAULT = TaskType(
    name="fault-unit",
    settings=FaultSettings,
    hint=ResourceHint(memory_base_gb=REQUEST_GB, memory_per_worker_gb=REQUEST_GB),
    count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:compute_unit",
    merge=f"{__name__}:merge",
    cost_setting="tag",
    description="units that leave their output once per computation, for the fault campaign",
)

REFS = (f"{__name__}:FAULT",)
