"""A real `simrun service` and `simrun worker` (child processes, real Redis) with unreadable
and skewed heartbeats beside the real one: the service quarantines the unreadable one
(logged once, counted in /metrics), /health stays ok and cheap, a run goes through, and
`simrun workers` shows each worker's clock skew with the service's warning."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from simrun.local.machine import free_port
from simrun.queues.client import JobQueue, dead_letter_counts
from tests.support.cli_harness import (
    WORK,
    Output,
    clean_env,
    health,
    run_module,
    simrun,
    start_simrun,
    stop_process,
    wait_for_workers,
    write_work,
)
from tests.support.heartbeats import worker_info
from tests.support.keys import TEST_KEY
from tests.support.redis_server import key_prefix
from tests.support.wait import until

pytestmark = pytest.mark.e2e


@dataclass
class Stack:
    url: str
    home: Path
    queue: JobQueue
    service: subprocess.Popen[str]
    log: Output


@pytest.fixture
async def stack(tmp_path: Path, redis_url: str) -> AsyncIterator[Stack]:
    """`simrun service` and one `simrun worker` on a prefix of their own, both live."""
    prefix = key_prefix("poison")
    port = free_port()
    common = ["--redis-url", redis_url, "--prefix", prefix, "--store", str(tmp_path / "store")]
    svc = start_simrun("service", "--port", str(port), *common, "--plugins", WORK, cwd=tmp_path)
    worker = start_simrun(
        "worker", *common, "--plugins", WORK, "--processes", "1", "--worker-memory-gb", "1",
        "--poll-delay-s", "0.01", cwd=tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log = Output(svc)
    queue = await JobQueue.connect(redis_url, prefix, key=TEST_KEY)
    try:
        await asyncio.to_thread(wait_for_workers, url, [svc, worker], 1, 60)
        yield Stack(url, tmp_path, queue, svc, log)
    finally:
        stop_process(worker)
        stop_process(svc)
        await queue.close()


async def test_poisoned_and_skewed_heartbeats_beside_a_real_worker(stack: Stack) -> None:
    """A garbage heartbeat (with its id in the index) is quarantined by the service: one
    dead letter, one log line, /metrics counts it; /health answers ok with the one real
    worker throughout; a submitted run succeeds; a heartbeat 45 s behind is listed by
    `simrun workers` with its skew and warning, and warned about once in the log."""
    queue = stack.queue
    await queue.redis.set(queue.keys.worker("w9"), b"garbage", px=60_000)
    late = worker_info("late", host="slowhost", clock_skew_s=-45.0)
    await queue.redis.set(queue.keys.worker("late"), late.to_json(), px=60_000)
    await queue.redis.zadd(queue.keys.workers, {"w9": 1.0, "late": 1.0})

    async def quarantined() -> bool:
        answer = await asyncio.to_thread(health, stack.url)
        assert answer is not None, "the service stopped answering /health"
        assert answer["ok"] is True, answer
        return (await dead_letter_counts(queue.redis, queue.keys)).get("heartbeat") == 1

    await until(quarantined, timeout_s=30, what="the service to quarantine the heartbeat")
    assert await queue.redis.exists(queue.keys.worker("w9")) == 0

    write_work(stack.home / "ok.yaml", units=4, seconds=0.01, tag="poisoned")
    done = await asyncio.to_thread(
        simrun, "submit", "ok.yaml", "--wait", "--plugins", WORK, "--url", stack.url,
        cwd=stack.home,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        metrics = (await http.get("/metrics")).text
    assert 'simrun_dead_letters{kind="heartbeat"} 1.0' in metrics, metrics
    listing = await asyncio.to_thread(
        run_module, "simrun.cli.workers", "--url", stack.url, env=clean_env()
    )
    assert listing.returncode == 0, listing.stdout + listing.stderr
    (row,) = [line for line in listing.stdout.splitlines() if line.startswith("late ")]
    assert "-45.0 s" in row, listing.stdout
    assert "clock 45.0 s behind Redis's" in row, listing.stdout
    assert "w9" not in listing.stdout

    await asyncio.to_thread(stop_process, stack.service)
    text = stack.log.text()
    assert text.count("its heartbeat cannot be read") == 1, text
    assert text.count("behind Redis") == 1, text
