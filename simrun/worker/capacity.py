"""What a worker container can run at once, unless its flags say: memory (cgroup limit, else
MemTotal), processes (CPU affinity bounded by a cgroup quota) and GPUs
(``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``). Parsing is pure."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from simrun.core.sizing import GIB
from simrun.worker.cgroups import parse_limit, parse_proc_cgroup

#: Memory kept back for the worker container's own process when memory is detected.
RESERVE_GB = 0.25


@dataclass(frozen=True)
class Capacity:
    """Memory (GiB), process slots and GPU device ids of one worker container."""

    memory_gb: float
    processes: int
    gpu_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.memory_gb) and self.memory_gb > 0):
            raise ValueError(f"capacity: memory_gb must be > 0, got {self.memory_gb!r}")
        if self.processes < 1:
            raise ValueError(f"capacity: processes must be >= 1, got {self.processes!r}")

    @property
    def gpus(self) -> int:
        return len(self.gpu_ids)


def parse_meminfo(text: str, name: str) -> int | None:
    """Bytes of line ``name`` of a ``/proc/meminfo`` text; None when it has none."""
    match = re.search(rf"^{name}:\s+(\d+)\s*kB", text, re.MULTILINE)
    return None if match is None else int(match.group(1)) * 1024


def parse_cpu_max(text: str) -> float | None:
    """CPUs of a cgroup v2 ``cpu.max`` ("<quota> <period>"); None for "max" (no quota)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit() or parts[1] == "0":
        raise ValueError(f"cpu.max holds {text.strip()!r}, not '<quota> <period>' or 'max'")
    return int(parts[0]) / int(parts[1])


def parse_cuda_visible_devices(value: str | None) -> tuple[str, ...] | None:
    """The devices ``CUDA_VISIBLE_DEVICES`` names up to a ``-1`` (None: unset)."""
    if value is None:
        return None
    devices = [part.strip() for part in value.split(",") if part.strip()]
    return tuple(devices[: devices.index("-1")] if "-1" in devices else devices)


def parse_nvidia_smi(text: str) -> tuple[str, ...]:
    """Device indices from the output of ``nvidia-smi -L`` ("GPU 0: <name> (UUID: …)")."""
    return tuple(re.findall(r"^GPU (\d+):", text, re.MULTILINE))


def _ancestors(root: Path, path: str | None) -> list[Path]:
    """``root/path`` and each parent up to ``root``, deepest first."""
    out: list[Path] = []
    current = Path(path.strip("/")) if path else Path()
    while True:
        out.append(root / current)
        if current == Path():
            return out
        current = current.parent


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _limit_from(files: list[Path]) -> int | None:
    """The smallest limit any of ``files`` sets (a cgroup is bounded by its ancestors)."""
    limits = []
    for file in files:
        text = _read(file)
        if text is not None and (value := parse_limit(text, file.name)) is not None:
            limits.append(value)
    return min(limits) if limits else None


def detect_memory_bytes(cgroup_root: Path, proc_root: Path) -> int:
    """The container's memory in bytes: its cgroup's limit (v2, else v1), else MemTotal."""
    paths = parse_proc_cgroup(_read(proc_root / "self" / "cgroup") or "")
    v2 = _ancestors(cgroup_root, paths.get(""))
    v1 = _ancestors(cgroup_root / "memory", paths.get("memory"))
    limit = _limit_from([p / "memory.max" for p in v2])
    if limit is None:
        limit = _limit_from([p / "memory.limit_in_bytes" for p in v1])
    if limit is not None:
        return limit
    total = parse_meminfo(_read(proc_root / "meminfo") or "", "MemTotal")
    if total is None:
        raise ValueError("/proc/meminfo has no MemTotal line")
    return total


def detect_processes(cgroup_root: Path, proc_root: Path) -> int:
    """CPUs this process may use, bounded by a cgroup v2 CPU quota (rounded down, >= 1)."""
    cpus = len(os.sched_getaffinity(0))
    v2 = parse_proc_cgroup(_read(proc_root / "self" / "cgroup") or "").get("")
    for path in _ancestors(cgroup_root, v2):
        text = _read(path / "cpu.max")
        quota = parse_cpu_max(text) if text is not None else None
        if quota is not None:
            cpus = min(cpus, max(1, math.floor(quota)))
    return max(1, cpus)


def detect_gpu_ids(environ: Mapping[str, str]) -> tuple[str, ...]:
    """GPU ids from ``CUDA_VISIBLE_DEVICES`` in ``environ``, else from ``nvidia-smi -L``."""
    visible = parse_cuda_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        return visible
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else ()


def detect_capacity(
    environ: Mapping[str, str],
    *,
    memory_gb: float | None = None,
    processes: int | None = None,
    gpus: int | None = None,
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    proc_root: Path = Path("/proc"),
) -> Capacity:
    """The capacity the flags give, the rest detected (``gpus``: that many detected ids, else
    "0".."gpus-1")."""
    if memory_gb is None:
        total_gb = detect_memory_bytes(cgroup_root, proc_root) / GIB
        memory_gb = max(total_gb - RESERVE_GB, total_gb / 2)
    if processes is None:
        processes = detect_processes(cgroup_root, proc_root)
    ids = detect_gpu_ids(environ)
    if gpus is not None:
        if gpus < 0:
            raise ValueError(f"--gpus must be >= 0, got {gpus}")
        ids = ids[:gpus] if len(ids) >= gpus else tuple(str(i) for i in range(gpus))
    return Capacity(memory_gb=memory_gb, processes=processes, gpu_ids=ids)
