"""Detecting the capacity of a worker container: parsing what the kernel and nvidia-smi
write, and reading it from a fake /proc and /sys/fs/cgroup."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.core.sizing import GIB
from simrun.worker.capacity import (
    Capacity,
    detect_capacity,
    detect_memory_bytes,
    parse_cpu_max,
    parse_cuda_visible_devices,
    parse_meminfo,
    parse_nvidia_smi,
)
from simrun.worker.cgroups import parse_limit, parse_proc_cgroup


@pytest.mark.parametrize(
    ("text", "expected"), [("max\n", None), ("8589934592\n", 8 * GIB), ("0", 0)]
)
def test_cgroup_v2_memory(text: str, expected: int | None) -> None:
    """memory.max is a byte count or 'max' for no limit."""
    assert parse_limit(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("9223372036854771712\n", None), ("-1", None), ("4294967296", 4 * GIB)],
)
def test_cgroup_v1_memory(text: str, expected: int | None) -> None:
    """memory.limit_in_bytes writes a number near 2**63 (or -1) for no limit."""
    assert parse_limit(text, "memory.limit_in_bytes") == expected


def test_bad_cgroup_files_are_named() -> None:
    """A limit file that holds no number says which file and what it holds."""
    with pytest.raises(ValueError, match=r"memory.max holds 'lots'"):
        parse_limit("lots", "memory.max")
    with pytest.raises(ValueError, match=r"cpu.max holds '100'"):
        parse_cpu_max("100")


MEMINFO = """MemTotal:       24576000 kB
MemFree:        20000000 kB
MemAvailable:   22000000 kB
Buffers:          100000 kB
"""


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        (MEMINFO, "MemTotal", 24576000 * 1024),
        (MEMINFO, "MemAvailable", 22000000 * 1024),
        ("MemTotal: 100 kB\n", "MemAvailable", None),  # an old kernel without MemAvailable
        ("", "MemAvailable", None),
        ("MemAvailable: lots kB\n", "MemAvailable", None),
    ],
)
def test_meminfo(text: str, name: str, expected: int | None) -> None:
    """A line of /proc/meminfo in bytes (the kernel writes kB), None without such a number."""
    assert parse_meminfo(text, name) == expected


def test_meminfo_without_memtotal_is_an_error(tmp_path: Path) -> None:
    """Memory detected from a /proc/meminfo without MemTotal (and no cgroup limit) fails."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemFree: 1 kB\n")
    with pytest.raises(ValueError, match="no MemTotal"):
        detect_memory_bytes(tmp_path / "cgroup", tmp_path / "proc")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("max 100000\n", None), ("200000 100000\n", 2.0), ("150000 100000", 1.5)],
)
def test_cpu_max(text: str, expected: float | None) -> None:
    """cpu.max is '<quota> <period>' (CPUs = quota / period) or 'max'."""
    assert parse_cpu_max(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", ()),
        ("0,1", ("0", "1")),
        (" 2 , 3 ,", ("2", "3")),
        ("GPU-8a1b,GPU-77c0", ("GPU-8a1b", "GPU-77c0")),
        ("0,-1,1", ("0",)),
        ("-1", ()),
    ],
)
def test_cuda_visible_devices(value: str | None, expected: tuple[str, ...] | None) -> None:
    """Unset means "not said"; empty or -1 hides every GPU; the list ends at -1."""
    assert parse_cuda_visible_devices(value) == expected


def test_nvidia_smi() -> None:
    """nvidia-smi -L lists one 'GPU <n>: …' line per device."""
    text = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-bbbb)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-cccc)\n"
    )
    assert parse_nvidia_smi(text) == ("0", "1")
    assert parse_nvidia_smi("No devices were found\n") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0::/\n", ("/", None)),
        ("0::/kubepods/pod1/c1\n", ("/kubepods/pod1/c1", None)),
        ("4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n0::/\n", ("/", "/docker/abc")),
    ],
)
def test_cgroup_paths(text: str, expected: tuple[str | None, str | None]) -> None:
    """The v2 path is the '0::' line; the v1 memory path is the line naming memory."""
    paths = parse_proc_cgroup(text)
    assert (paths.get(""), paths.get("memory")) == expected


def _fake_roots(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "cgroup", tmp_path / "proc"


@pytest.mark.parametrize(
    ("files", "memory_gb"),
    [
        # cgroup v2 with a limit on the container's own group and a larger one above it.
        (
            {
                "proc/self/cgroup": "0::/pod/c1\n",
                "cgroup/pod/c1/memory.max": str(4 * GIB),
                "cgroup/pod/memory.max": str(16 * GIB),
                "proc/meminfo": "MemTotal: 67108864 kB\n",
            },
            4 - 0.25,
        ),
        # cgroup v2 without a limit: the physical memory.
        (
            {
                "proc/self/cgroup": "0::/\n",
                "cgroup/memory.max": "max\n",
                "proc/meminfo": "MemTotal: 8388608 kB\n",
            },
            8 - 0.25,
        ),
        # cgroup v1 with a limit.
        (
            {
                "proc/self/cgroup": "4:memory:/docker/x\n0::/\n",
                "cgroup/memory/docker/x/memory.limit_in_bytes": str(2 * GIB),
                "proc/meminfo": "MemTotal: 8388608 kB\n",
            },
            2 - 0.25,
        ),
    ],
)
def test_detect_memory(tmp_path: Path, files: dict[str, str], memory_gb: float) -> None:
    """Memory is the tightest cgroup limit of the container's group and its ancestors,
    else MemTotal, less a reserve for the worker itself."""
    cgroup_root, proc_root = _fake_roots(tmp_path, files)
    capacity = detect_capacity({}, processes=1, cgroup_root=cgroup_root, proc_root=proc_root)
    assert capacity.memory_gb == pytest.approx(memory_gb)


def test_detect_processes_and_gpus(tmp_path: Path) -> None:
    """Processes are bounded by a cgroup CPU quota; GPUs come from CUDA_VISIBLE_DEVICES and
    --gpus takes that many of them, or numbers them when none are detected."""
    cgroup_root, proc_root = _fake_roots(
        tmp_path, {"proc/self/cgroup": "0::/\n", "cgroup/cpu.max": "100000 100000\n"}
    )
    environ = {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    capacity = detect_capacity(environ, memory_gb=3.0, cgroup_root=cgroup_root, proc_root=proc_root)
    assert capacity == Capacity(3.0, 1, ("GPU-a", "GPU-b"))
    one = detect_capacity(environ, memory_gb=3.0, processes=2, gpus=1, proc_root=proc_root)
    assert one.gpu_ids == ("GPU-a",)
    hidden = {"CUDA_VISIBLE_DEVICES": ""}
    assert detect_capacity(hidden, memory_gb=1.0, processes=1).gpus == 0
    assert detect_capacity(hidden, memory_gb=1.0, processes=1, gpus=2).gpu_ids == ("0", "1")


def test_capacity_rejects_nonsense() -> None:
    """A capacity of no memory or no process cannot run anything and is refused."""
    with pytest.raises(ValueError, match="memory_gb must be > 0"):
        Capacity(0.0, 1)
    with pytest.raises(ValueError, match="processes must be >= 1"):
        Capacity(1.0, 0)
