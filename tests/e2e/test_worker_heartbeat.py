"""The heartbeat options of ``simrun worker``: ``--heartbeat-s`` and ``--heartbeat-ttl-s``
are checked, and a real worker process beats as they say."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from simrun.cli.worker import worker
from simrun.core.reports import WorkerInfo
from simrun.queues.client import JobQueue
from tests.support.cli_harness import ended
from tests.support.harness import make_spec, start_worker_process
from tests.support.keys import TEST_KEY
from tests.support.wait import until

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--heartbeat-s", "2", "--heartbeat-ttl-s", "1"], "1 s is not longer than"),
        (["--heartbeat-s", "2", "--heartbeat-ttl-s", "2"], "2 s is not longer than"),
        (["--heartbeat-ttl-s", "0"], "--heartbeat-ttl-s"),
        (["--heartbeat-s", "0.01"], "--heartbeat-s"),
    ],
)
def test_a_heartbeat_that_would_expire_between_beats_is_refused(
    args: list[str], expected: str
) -> None:
    """A heartbeat time to live not longer than the interval (or not positive, or an
    interval below 0.05 s) is a usage error naming the option, before anything starts."""
    result = CliRunner().invoke(worker, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2, result.output
    assert expected in result.output


async def _ttls_ms(queue: JobQueue, worker_id: str, seconds: float) -> list[int]:
    """The time to live of a worker's heartbeat key (ms; negative when it is missing),
    sampled for ``seconds``."""
    out: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.append(int(await queue.redis.pttl(queue.keys.worker(worker_id))))
        await asyncio.sleep(0.02)
    return out


@pytest.mark.parametrize(
    ("args", "ttl_ms"),
    [
        (["--heartbeat-s", "0.3", "--heartbeat-ttl-s", "1.5"], 1500),
        (["--heartbeat-s", "0.3"], 1200),  # four intervals by default
    ],
)
async def test_a_worker_beats_as_its_options_say(
    redis_url: str, redis_prefix: str, args: list[str], ttl_ms: int
) -> None:
    """A real worker process writes its heartbeat with a time to live of --heartbeat-ttl-s
    (four times --heartbeat-s when not given), again and again so that it never expires:
    sampled for a few beats, the key is always there and its TTL is at most that, and close
    to it after a beat."""
    proc = start_worker_process(redis_url, redis_prefix, "--id", "beating", *args)
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        await until(
            lambda: queue.redis.exists(queue.keys.worker("beating")),
            timeout_s=20,
            what="the worker's first heartbeat",
            check=ended(proc),
        )
        ttls = await _ttls_ms(queue, "beating", 2.0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        await queue.close()
    assert min(ttls) > 0, "the heartbeat expired while the worker ran"
    assert ttl_ms - 250 < max(ttls) <= ttl_ms, max(ttls)


async def test_the_heartbeat_says_how_much_memory_the_workers_processes_hold(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A real worker's heartbeat carries the memory its processes hold in fact
    (``used_memory_gb``, measured every beat), next to what admission reserved: while a
    unit holds 300 MiB it reads at least that much, and it falls back once the unit ended
    (the dashboard's workers page shows it against the container's capacity)."""
    proc = start_worker_process(
        redis_url, redis_prefix, "--id", "measured", "--heartbeat-s", "0.2",
        "--processes", "1", "--worker-memory-gb", "2", store=tmp_path,
    )  # fmt: skip
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)

    async def used() -> float | None:
        raw = await queue.redis.get(queue.keys.worker("measured"))
        return None if raw is None else WorkerInfo.from_json(raw).used_memory_gb

    async def wait_for(rule: Callable[[float], bool], what: str) -> float:
        async def read() -> tuple[float] | None:  # a tuple: 0 GiB is a reading too
            found = await used()
            return (found,) if found is not None and rule(found) else None

        (found,) = await until(read, timeout_s=30, what=what, check=ended(proc))
        return found

    try:
        idle = await wait_for(lambda gb: gb >= 0, "memory in the heartbeat")
        job = make_spec(
            tmp_path, "hold", "test-hog", [0], {"hog_mb": 300, "seconds": 4}, memory_gb=1
        )
        assert await queue.enqueue(job)
        held = await wait_for(lambda gb: gb >= idle + 0.25, "the unit's 300 MiB in the heartbeat")
        after = await wait_for(lambda gb: gb < held - 0.2, "the memory to fall back")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        await queue.close()
    assert after >= 0
