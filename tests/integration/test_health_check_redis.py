"""``python -m simrun.worker.health`` against a real Redis and heartbeats written by the
worker's own `Heartbeat`."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from simrun.core.reports import WorkerInfo
from simrun.local.machine import free_port
from simrun.queues.keys import Keys
from simrun.worker.health import BATCH, check
from simrun.worker.heartbeat import Heartbeat
from tests.support.cli_harness import run_module
from tests.support.heartbeats import worker_info

pytestmark = pytest.mark.redis

HOST = socket.gethostname()


def info(worker_id: str, host: str = HOST, age_s: float = 0.0) -> WorkerInfo:
    now = time.time()
    return worker_info(worker_id, host=host, pid=os.getpid(), started=now - 60, updated=now - age_s)


def health(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the health check the way a container's HEALTHCHECK does: REDIS_URL in the
    environment, nothing else."""
    env = {**os.environ, "REDIS_URL": redis_url}
    return run_module("simrun.worker.health", *args, env=env)


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[AsyncRedis]:
    client = AsyncRedis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_fresh_heartbeat_is_healthy_and_a_cleared_one_is_not(
    aredis: AsyncRedis, redis_url: str, redis_prefix: str
) -> None:
    """Exit 0 while this host's worker heartbeat is fresh; exit 1 once the worker cleared
    it on a clean stop."""
    keys = Keys(redis_prefix)
    worker_id = f"{HOST}-{os.getpid()}-abc123"
    heartbeat = Heartbeat(aredis, keys, lambda: info(worker_id))
    await heartbeat.beat()
    done = health(redis_url, "--prefix", redis_prefix)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"ok: worker {worker_id} on {HOST}")

    await heartbeat.clear(worker_id)
    done = health(redis_url, "--prefix", redis_prefix)
    assert done.returncode == 1
    assert "no heartbeat of a worker on host" in done.stdout


async def test_stale_heartbeat_is_unhealthy(
    aredis: AsyncRedis, redis_url: str, redis_prefix: str
) -> None:
    """A heartbeat whose time is older than --max-age-s makes the check fail, even while
    its key has not expired yet."""
    keys = Keys(redis_prefix)
    await Heartbeat(aredis, keys, lambda: info(f"{HOST}-1-old", age_s=20)).beat()
    assert health(redis_url, "--prefix", redis_prefix).returncode == 0
    done = health(redis_url, "--prefix", redis_prefix, "--max-age-s", "10")
    assert done.returncode == 1
    assert done.stdout.startswith("stale:")


async def test_explicit_id_and_other_prefixes(
    aredis: AsyncRedis, redis_url: str, redis_prefix: str
) -> None:
    """--id looks up that worker whatever its host; a heartbeat under another prefix is
    not this container's."""
    keys = Keys(redis_prefix)
    await Heartbeat(aredis, keys, lambda: info("gpu-box-1", host="somewhere-else")).beat()
    assert health(redis_url, "--prefix", redis_prefix, "--id", "gpu-box-1").returncode == 0
    assert health(redis_url, "--prefix", redis_prefix).returncode == 1
    assert health(redis_url, "--prefix", f"{redis_prefix}-x", "--id", "gpu-box-1").returncode == 1


def test_unreachable_redis_is_unhealthy_and_hides_the_password() -> None:
    """No Redis answering: exit 1 with a message that names the server but not the
    password."""
    port = free_port()
    done = health(f"redis://:hunter2@127.0.0.1:{port}/0", "--timeout-s", "2")
    assert done.returncode == 1
    assert done.stdout.startswith(f"cannot read heartbeats from redis://:***@127.0.0.1:{port}/0")
    assert "hunter2" not in done.stdout + done.stderr


async def test_finds_its_worker_among_many(
    aredis: AsyncRedis, redis_url: str, redis_prefix: str
) -> None:
    """A worker started with an explicit id that does not start with the host name is
    still found by host, behind more heartbeats of other hosts than one read takes."""
    keys = Keys(redis_prefix)
    for n in range(BATCH * 2 + 10):
        await Heartbeat(aredis, keys, lambda n=n: info(f"a{n:04d}", host=f"h{n}")).beat()
    await Heartbeat(aredis, keys, lambda: info("zz-mine")).beat()
    client = Redis.from_url(redis_url)
    try:
        verdict = check(client, keys, host=HOST, worker_id=None, now=time.time())
    finally:
        client.close()
    assert verdict.healthy, verdict.message
    assert "zz-mine" in verdict.message
