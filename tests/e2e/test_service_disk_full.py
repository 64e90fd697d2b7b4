"""`simrun submit` to a `simrun service` whose store is on a full volume (a real 2 MiB
tmpfs; skipped where mounting is not permitted): the command fails with one line naming
the volume and its free bytes, no traceback, and /health is degraded saying so; with space
back it submits. Real processes,
real Redis."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simrun.local.machine import free_port
from tests.support import REPO
from tests.support.cli_harness import (
    WORK,
    clean_env,
    simrun,
    start_simrun,
    stop_process,
    wait_for_service,
)
from tests.support.redis_server import key_prefix
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for this test alone (root only), unmounted after it."""
    mnt = tmp_path / "volume"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root in a privileged container): {done.stderr}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def fill(volume: Path) -> Path:
    """Write a file on ``volume`` until not one byte more fits: the file."""
    filler = volume / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"x" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def test_submit_to_a_full_store_fails_in_one_line(
    tmp_path: Path, volume: Path, redis_url: str
) -> None:
    """``simrun submit`` exits 1 printing one line: the service has no space left, the store,
    the mount point and its free bytes; nothing is listed in ``/runs``, /health is degraded
    with the same line. Once the filler is removed, /health drops it within seconds and the
    same command submits (exit 0)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = volume / "store"
    proc = start_simrun(
        "service", "--port", str(port), "--redis-url", redis_url, "--prefix", key_prefix("full"),
        "--store", str(store), "--plugins", WORK, cwd=tmp_path, env=clean_env(),
    )  # fmt: skip
    try:
        wait_for_service(url, proc, timeout_s=60)
        filler = fill(volume)
        heat = str(REPO / "examples" / "heat.yaml")
        refused = simrun("submit", heat, "--url", url, cwd=tmp_path)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        printed = [line for line in (refused.stdout + refused.stderr).splitlines() if line]
        assert len(printed) == 1, printed
        assert "no space left: the store " in printed[0], printed
        assert f"mounted at {volume}, with 0 bytes free" in printed[0], printed
        assert httpx.get(f"{url}/runs").json() == []
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "degraded", health
        assert f"mounted at {volume}, with 0 bytes free" in health["problems"]["disk"], health
        filler.unlink()
        wait_until(
            lambda: "disk" not in httpx.get(f"{url}/health").json()["problems"],
            timeout_s=30,
            what="/health without the disk problem once space is back",
        )
        taken = simrun("submit", heat, "--url", url, cwd=tmp_path)
        assert taken.returncode == 0, taken.stdout + taken.stderr
        assert len(httpx.get(f"{url}/runs").json()) == 1
    finally:
        stop_process(proc)
