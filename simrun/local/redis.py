"""A private ``redis-server`` for embedded mode and the tests: `PrivateRedis`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from simrun.local.machine import LocalError, free_port, last_line

REDIS_MISSING = (
    "no redis-server on the PATH and REDIS_URL is not set: install one "
    "(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) "
    "or point REDIS_URL at a Redis server"
)


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
    """A ``redis-server`` of this session alone, on a free loopback port, its files in a
    temporary directory that `stop` removes. `kill` and `start` again restart it where it
    was, with its data when it ``persist``s (an append-only file synced at every write)."""

    def __init__(self, persist: bool = False, port: int | None = None) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        #: Known before `start` when ``port`` is given.
        self.url = "" if port is None else f"redis://127.0.0.1:{port}/0"
        self.persist = persist
        self.port: int | None = port
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def argv(self, exe: str, port: int, directory: Path) -> list[str]:
        keep = ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else []
        return [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", *keep, "--dir", str(directory)]  # fmt: skip

    def start(self, timeout_s: float = 10.0) -> str:
        """Start it (again: where it was) and wait until it answers; its URL. `LocalError`
        when it cannot."""
        exe = find_redis_server()
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="simrun-redis-")
        directory = Path(self._dir.name)
        port = self.port = self.port or free_port()
        with (directory / "redis.log").open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv(exe, port, directory),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the server (its files stay)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def directory(self) -> Path | None:
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
        self.port = None
