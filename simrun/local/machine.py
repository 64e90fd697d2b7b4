"""What this machine offers embedded mode: CPUs, free memory, GPUs, loopback ports."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from simrun.errors import SimrunError
from simrun.worker.capacity import detect_gpu_ids, detect_memory_bytes, parse_meminfo

#: Share of the available memory the worker containers get by default.
MEMORY_SHARE = 0.8


class LocalError(SimrunError, RuntimeError):
    """Embedded mode cannot start or go on; the message says why and what to do."""


def machine() -> tuple[int, float]:
    """This machine's CPUs (those this process may use) and available memory in GiB."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        cores = os.cpu_count() or 1
    available: float | None = None
    with contextlib.suppress(OSError):
        found = parse_meminfo(Path("/proc/meminfo").read_text(), "MemAvailable")
        available = None if found is None else found / 2**30
    if available is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 4 * 2**30
        available = total / 2**30 / 2  # without a figure of what is free, half of it
    with contextlib.suppress(OSError, ValueError):
        limit = detect_memory_bytes(Path("/sys/fs/cgroup"), Path("/proc"))
        available = min(available, limit / 2**30)
    return max(1, cores), available


def local_scratch_gb(store: Path) -> float | None:
    """The free space (GiB) of the disk at ``store`` (or its nearest existing parent): where
    the embedded workers keep their scratch. None when it cannot be read."""
    here = store.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free / 2**30
    except OSError:
        return None


def default_capacity(
    cores: int,
    available_gb: float,
    workers: int,
    processes: int | None = None,
    memory_gb: float | None = None,
) -> tuple[int, float]:
    """Processes and memory (GiB) of each of ``workers`` containers: what is given, else
    the cores shared among them and `MEMORY_SHARE` of the available memory."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if processes is None:
        processes = max(1, cores // workers)
    if memory_gb is None:
        memory_gb = max(0.25, math.floor(MEMORY_SHARE * available_gb / workers * 10) / 10)
    return processes, memory_gb


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with free_socket() as sock:
        port: int = sock.getsockname()[1]
        return port


def last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        for line in reversed(path.read_text(errors="replace").splitlines()):
            if line.strip():
                return line.strip()
    return "(no output)"


def local_gpus(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The GPU ids of this machine (`detect_gpu_ids`)."""
    return detect_gpu_ids(environ)


def gpu_shares(ids: Sequence[str], workers: int) -> tuple[tuple[str, ...], ...]:
    """The GPUs of each of ``workers`` containers: ``ids`` dealt in turn, none to two."""
    return tuple(tuple(ids[n::workers]) for n in range(workers))
