"""Task types of the memory, log and scratch tests (issue 11, items 7-10), each doing one
thing that used to escape a worker's bounds.

* ``mem-spawn``: a unit starts a child process (which first writes its pid to
  ``child-<index>.pid`` in the output directory) that holds ``child_mb`` MiB (every page
  written) and then sleeps for a long time, directly, in a new session (``setsid``) or as a
  grandchild left by a double fork (its parent exits, so it is an orphan); the unit waits
  until the child holds its memory, sleeps ``seconds`` and returns, leaving the child
  running.
* ``mem-spike``: a unit writes ``spike_mb`` MiB of *shared* anonymous memory (``mmap``
  ``MAP_SHARED``), which the kernel charges to its cgroup but which is not ``RssAnon``, so
  the sampler does not see it: only the kernel's limit can stop it.
* ``mem-chatty``: a unit writes ``mb`` MiB to stdout and as much to stderr, each starting
  with a line ``HEAD <stream> <index>`` and ending with ``TAIL <stream> <index>``.
* ``mem-scratch``: a unit writes a file into the task's scratch directory; the units in
  ``fail_indices`` then raise.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType

MIB = 2**20

# The program of the child: hold N MiB, say so on stdout, then sleep (it never exits alone).
_HOLD = (
    "import os, sys, time\n"
    "open({pid_file!r}, 'w').write(str(os.getpid()))\n"
    "held = bytearray({mb} * 2**20)\n"
    "for i in range(0, len(held), 4096): held[i] = 1\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)
# A double fork: the middle process starts the holder in a new session, prints its pid
# and exits, so the holder is an orphan outside the unit's process tree and group.
_DOUBLE_FORK = (
    "import subprocess, sys\n"
    "p = subprocess.Popen([sys.executable, '-c', {hold!r}], stdout=subprocess.PIPE,\n"
    "                     start_new_session=True, text=True)\n"
    "if p.stdout.readline().strip() == 'held': print(p.pid, flush=True)\n"
)


class MemSettings(BaseModel):
    """Knobs of the types of this module; each uses a few."""

    units: int = 1
    child_mb: int = 0
    escape: str = "none"  # "none", "setsid" or "double_fork"
    seconds: float = 0.0
    spike_mb: int = 0
    mb: int = 0
    fail_indices: list[int] = []


def count_units(settings: MemSettings) -> int:
    return settings.units


def spawn_unit(settings: MemSettings, index: int, paths: TaskPaths) -> None:
    paths.out.mkdir(parents=True, exist_ok=True)
    hold = _HOLD.format(mb=settings.child_mb, pid_file=str(paths.out / f"child-{index}.pid"))
    if settings.escape == "double_fork":
        middle = subprocess.run(
            [sys.executable, "-c", _DOUBLE_FORK.format(hold=hold)],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        if not middle.stdout.strip():
            raise RuntimeError(f"the grandchild of unit {index} ended before it held its memory")
    else:
        proc = subprocess.Popen(
            [sys.executable, "-c", hold],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=settings.escape == "setsid",
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "held":
            raise RuntimeError(f"the child of unit {index} ended before it held its memory")
    time.sleep(settings.seconds)


def spike_unit(settings: MemSettings, index: int, paths: TaskPaths) -> None:
    shared = mmap.mmap(-1, settings.spike_mb * MIB, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    chunk = b"\x01" * MIB
    for _ in range(settings.spike_mb):
        shared.write(chunk)
    shared.close()


def chatty_unit(settings: MemSettings, index: int, paths: TaskPaths) -> None:
    line = b"x" * 1023 + b"\n"
    for stream, fd in (("out", 1), ("err", 2)):
        os.write(fd, f"HEAD {stream} {index}\n".encode())
        for _ in range(settings.mb * 1024):
            os.write(fd, line)
        os.write(fd, f"TAIL {stream} {index}\n".encode())


def scratch_unit(settings: MemSettings, index: int, paths: TaskPaths) -> None:
    paths.scratch.mkdir(parents=True, exist_ok=True)
    (paths.scratch / f"tmp-{index}.bin").write_bytes(b"\x00" * 1024)
    if index in settings.fail_indices:
        raise RuntimeError(f"unit {index} fails on purpose")
    paths.out.mkdir(parents=True, exist_ok=True)
    (paths.out / f"unit-{index}.txt").write_text("done")


def _type(name: str, unit: str) -> TaskType:
    return TaskType(
        name=name,
        settings=MemSettings,
        hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.25),
        count_units=f"{__name__}:count_units",
        compute_unit=f"{__name__}:{unit}",
    )


SPAWN = _type("mem-spawn", "spawn_unit")
SPIKE = _type("mem-spike", "spike_unit")
CHATTY = _type("mem-chatty", "chatty_unit")
SCRATCH = _type("mem-scratch", "scratch_unit")

REFS = tuple(f"{__name__}:{name}" for name in ("SPAWN", "SPIKE", "CHATTY", "SCRATCH"))
