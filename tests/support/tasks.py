"""Test task types, each doing one thing a worker must cope with.

Every unit that completes writes ``unit-<index>.json`` into the task's output directory
with when it ran (unix seconds), in which process, and what ``CUDA_VISIBLE_DEVICES`` it
saw, so that tests can check overlap, placement and GPUs from the files of real runs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType

MIB = 2**20
#: What hog units keep for the life of their process (``keep_mb``).
_KEPT: list[bytearray] = []
#: What the setup of a task keeps for the life of its process (``setup_mb``), by task.
_SET_UP: dict[str, bytearray] = {}


class Settings(BaseModel):
    """Knobs of the test types; each type uses a few."""

    units: int = 4
    seconds: float = 0.0  # how long a unit sleeps (or spins, for "spin")
    sleep_indices: list[int] = []  # units that sleep (all when empty)
    hog_mb: int = 0  # memory a unit allocates and touches
    hog_indices: list[int] = []  # units that hog (all when empty)
    keep_mb: int = 0  # memory a hog unit allocates and never frees (a leak in its process)
    fail_indices: list[int] = []  # units that raise
    print_indices: list[int] = []  # flaky units that print a line to stdout and to stderr
    crash_indices: list[int] = []  # units whose process ends itself
    crash_how: str = "exit"  # "exit" (os._exit(3)) or "segv" (SIGSEGV to itself)
    setup_fails: bool = False
    setup_mb: int = 0  # memory the setup allocates, touches and holds (a model loaded once)


def _record(paths: TaskPaths, index: int, start: float, **extra: Any) -> None:
    paths.out.mkdir(parents=True, exist_ok=True)
    record = {
        "index": index,
        "start": start,
        "end": time.time(),
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **extra,
    }
    tmp = paths.out / f".unit-{index}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(paths.out / f"unit-{index}.json")


def count_units(settings: Settings) -> int:
    return settings.units


def setup(settings: Settings, paths: TaskPaths) -> None:
    """Leaves one line per call in ``setup-<pid>.txt``; raises with ``setup_fails``; holds
    ``setup_mb`` MiB (every page touched) for the rest of its process's life."""
    if settings.setup_fails:
        raise RuntimeError("setup fails on purpose")
    if settings.setup_mb:
        _SET_UP[str(paths.task_dir)] = _touched(settings.setup_mb)
    paths.out.mkdir(parents=True, exist_ok=True)
    with (paths.out / f"setup-{os.getpid()}.txt").open("a") as fh:
        fh.write("setup\n")


def sleep_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    start = time.time()
    if not settings.sleep_indices or index in settings.sleep_indices:
        time.sleep(settings.seconds)
    _record(paths, index, start)


def spin_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    """Keeps a CPU busy for ``seconds`` (the benchmark's CPU-bound unit)."""
    start = time.time()
    end = time.perf_counter() + settings.seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    _record(paths, index, start)


def noop_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    """Does nothing at all (for measuring the worker's own overhead)."""


def _touched(size_mb: int) -> bytearray:
    block = bytearray(size_mb * MIB)
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    return block


def hog_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    """Allocates ``hog_mb`` MiB (every page touched), holds it ``seconds``, then records;
    keeps ``keep_mb`` MiB more until its process ends."""
    start = time.time()
    if settings.keep_mb:
        _KEPT.append(_touched(settings.keep_mb))
    held = None
    if not settings.hog_indices or index in settings.hog_indices:
        held = bytearray(settings.hog_mb * MIB)
        for offset in range(0, len(held), 4096):
            held[offset] = 1
    time.sleep(settings.seconds)
    _record(paths, index, start, held_mb=0 if held is None else len(held) // MIB)


def flaky_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    """Raises for the units in ``fail_indices``; the others record."""
    start = time.time()
    if index in settings.print_indices:
        print(f"unit {index} says hello on stdout")
        print(f"unit {index} says hello on stderr", file=sys.stderr)
    if index in settings.fail_indices:
        raise ValueError(f"unit {index} fails on purpose")
    _record(paths, index, start)


def crash_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    """Ends its own process for the units in ``crash_indices`` (after printing a line to
    stdout and one to stderr, flushed, when in ``print_indices``)."""
    start = time.time()
    if index in settings.print_indices:
        print(f"unit {index} says hello on stdout", flush=True)
        print(f"unit {index} says hello on stderr", file=sys.stderr, flush=True)
    if index in settings.crash_indices:
        if settings.crash_how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(3)
    _record(paths, index, start)


def merge(settings: Settings, paths: TaskPaths) -> None:
    """Lists the unit files in ``merged.json``; a hog unit's memory counts here too."""
    if settings.hog_mb:
        held = bytearray(settings.hog_mb * MIB)
        for offset in range(0, len(held), 4096):
            held[offset] = 1
    names = sorted(p.name for p in Path(paths.out).glob("unit-*.json"))
    (paths.out / "merged.json").write_text(json.dumps(names))


def _type(name: str, unit: str, **extra: Any) -> TaskType:
    return TaskType(
        name=name,
        settings=Settings,
        hint=ResourceHint(memory_base_gb=0.5, memory_per_worker_gb=0.5),
        count_units=f"{__name__}:count_units",
        setup=f"{__name__}:setup",
        compute_unit=f"{__name__}:{unit}",
        merge=f"{__name__}:merge",
        **extra,
    )


SLEEP = _type("test-sleep", "sleep_unit")
SPIN = _type("test-spin", "spin_unit")
NOOP = TaskType(
    name="test-noop",
    settings=Settings,
    count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:noop_unit",
)
HOG = _type("test-hog", "hog_unit")
FLAKY = _type("test-flaky", "flaky_unit")
CRASH = _type("test-crash", "crash_unit")
#: An unsplit type: copies its settings file into its output directory, via /bin/sh.
COPY = TaskType(
    name="test-copy",
    settings=Settings,
    command='sh -c \'cp "$1" "$2/settings-copy.json"\' sh {settings} {out}',
)
