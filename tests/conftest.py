"""Shared fixtures. Tests are split by what they need: ``pure/`` (nothing), ``redis/`` (a
real Redis server), ``e2e/`` (real service and worker processes).

The Redis server is one the tests start themselves (``redis-server`` from PATH, on a free
port, in a temporary directory), so it may be flushed; ``SIMRUN_TEST_REDIS_URL`` points the
tests at another server instead, which they then never flush: every test uses its own key
prefix (`redis_prefix`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class RedisServer:
    url: str
    owned: bool  # True when the tests started it (and so may flush or restart it)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server on a free loopback port; returns the process and its URL."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail(
            "redis-server is not on PATH: install it (Debian: apt-get install redis-server)"
        )
    port = free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"redis-server did not answer on port {port} within 10 s")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real Redis server for the whole test session."""
    url = os.environ.get("SIMRUN_TEST_REDIS_URL")
    if url:
        yield RedisServer(url=url, owned=False)
        return
    proc, url = start_redis_server(tmp_path_factory.mktemp("redis"))
    try:
        yield RedisServer(url=url, owned=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test alone, so tests never see each other's keys."""
    return f"simrun-test-{uuid.uuid4().hex[:10]}"
