"""What this machine offers embedded mode: its CPUs and free memory, free loopback ports,
and a private ``redis-server``."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = [
    "MEMORY_SHARE",
    "REDIS_MISSING",
    "LocalError",
    "PrivateRedis",
    "default_capacity",
    "find_redis_server",
    "free_socket",
    "last_line",
    "machine",
    "parse_meminfo_available",
]

REDIS_MISSING = (
    "no redis-server on the PATH and REDIS_URL is not set: install one "
    "(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) "
    "or point REDIS_URL at a Redis server"
)
#: Share of the available memory the worker containers get by default.
MEMORY_SHARE = 0.8


class LocalError(RuntimeError):
    """Embedded mode cannot start or go on; the message says why and what to do."""


# --- the machine ----------------------------------------------------------------------------


def parse_meminfo_available(text: str) -> int | None:
    """Bytes of ``MemAvailable`` in a ``/proc/meminfo`` text; None when it has none."""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "MemAvailable":
            parts = rest.split()
            if parts and parts[0].isdigit():
                return int(parts[0]) * 1024
    return None


def machine() -> tuple[int, float]:
    """This machine's CPUs (those this process may use) and available memory in GiB."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        cores = os.cpu_count() or 1
    available: float | None = None
    with contextlib.suppress(OSError):
        found = parse_meminfo_available(Path("/proc/meminfo").read_text())
        available = None if found is None else found / 2**30
    if available is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 4 * 2**30
        available = total / 2**30 / 2  # without a figure of what is free, half of it
    with contextlib.suppress(OSError, ValueError):
        from simrun.worker.capacity import detect_memory_bytes

        limit, _ = detect_memory_bytes(Path("/sys/fs/cgroup"), Path("/proc"))
        available = min(available, limit / 2**30)
    return max(1, cores), available


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


def _free_port() -> int:
    with free_socket() as sock:
        port: int = sock.getsockname()[1]
        return port


def last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        for line in reversed(path.read_text(errors="replace").splitlines()):
            if line.strip():
                return line.strip()
    return "(no output)"


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def find_redis_server() -> str:
    """The ``redis-server`` on PATH; `LocalError` saying how to get one when there is none."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise LocalError(REDIS_MISSING)
    return exe


class PrivateRedis:
    """A ``redis-server`` of this session alone: a free loopback port, no persistence, its
    files in a temporary directory removed by `stop`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def start(self, timeout_s: float = 10.0) -> str:
        """Start it and wait until it answers; its URL. `LocalError` when it cannot."""
        exe = find_redis_server()
        self._dir = tempfile.TemporaryDirectory(prefix="simrun-redis-")
        directory = Path(self._dir.name)
        port = _free_port()
        argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(directory)]  # fmt: skip
        with (directory / "redis.log").open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LocalError(
                    f"redis-server ({exe}) exited at once with code {self.proc.returncode}: "
                    f"{last_line(directory / 'redis.log')}"
                )
            if _answers_ping(port):
                self.url = f"redis://127.0.0.1:{port}/0"
                return self.url
            time.sleep(0.05)
        self.stop()
        raise LocalError(f"redis-server ({exe}) did not answer on port {port} within {timeout_s} s")

    @property
    def directory(self) -> Path | None:
        """The temporary directory of the server, while it has one."""
        return None if self._dir is None else Path(self._dir.name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
