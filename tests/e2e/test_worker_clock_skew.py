"""A real worker whose clock is wrong, and one that meets an unreadable attempt: neither
waits nor fails. The worker process runs with `time.time` 45 s behind
(`tests.support.skewed_worker`); without the backdated score arq would give it no job for
45 s."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from simrun.core.reports import WorkerInfo
from simrun.queues.client import JobQueue, dead_letter_counts
from simrun.worker.settings import WorkerSettings
from tests.support import REPO
from tests.support.cli_harness import ended
from tests.support.harness import PLUGINS, RUN, all_reports, make_spec, run_burst, spawn
from tests.support.keys import TEST_KEY, TEST_KEY_ENV
from tests.support.wait import until

pytestmark = pytest.mark.e2e

#: How far behind the worker's clock is (s), and the most a job may wait for it (s): far
#: below the skew, well above a loaded machine's start of a unit.
BEHIND_S = 45.0
PROMPT_S = 20.0


async def test_a_worker_whose_clock_is_behind_takes_a_job_at_once(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A real worker process 45 s behind Redis's clock says so in its heartbeat
    (``clock_skew_s`` about -45, and one warning line in its log) and takes a job enqueued
    now by this process well within the skew."""
    flags = WorkerSettings(
        redis_url=redis_url, prefix=redis_prefix, plugins=PLUGINS, python_path=(str(REPO),),
        poll_delay_s=0.01, worker_id="late", heartbeat_s=0.3, processes=1, store=tmp_path,
    )  # fmt: skip
    argv = [sys.executable, "-m", "tests.support.skewed_worker", str(-BEHIND_S), "worker"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = spawn([*argv, *flags.to_argv()], TEST_KEY_ENV, stdout=out, stderr=out)
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:

        async def beat() -> WorkerInfo | None:
            raw = await queue.redis.get(queue.keys.worker("late"))
            return None if raw is None else WorkerInfo.from_json(raw)

        info = await until(beat, timeout_s=30, what="the worker's heartbeat", check=ended(proc))
        assert info.clock_skew_s is not None
        assert abs(info.clock_skew_s + BEHIND_S) < 2.0, info.clock_skew_s
        job = make_spec(tmp_path, "t", "test-noop", [0, 1])
        enqueued = time.monotonic()
        assert await queue.enqueue(job)

        async def reported() -> bool:
            return job.job_id in await all_reports(queue)

        await until(reported, timeout_s=PROMPT_S, what="the job's report", check=ended(proc))
        took_s = time.monotonic() - enqueued
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        await queue.close()
    assert took_s < PROMPT_S
    text = log.read_text(errors="replace")
    assert text.count("behind Redis") == 1, text


async def test_an_unreadable_attempt_does_not_fail_the_job(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A job whose units have an attempt in Redis that is not an integer runs them all
    (each counts as current), and the value is quarantined once."""
    spec = make_spec(tmp_path, "t", "test-noop", [0, 1, 2])
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        await queue.redis.hset(queue.keys.attempts(RUN, "t"), mapping={"1": "garbage"})
    finally:
        await queue.close()
    _, reports = await run_burst(redis_url, redis_prefix, [spec])
    assert reports[spec.job_id].outcomes == {0: "done", 1: "done", 2: "done"}
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        assert (await dead_letter_counts(queue.redis, queue.keys)).get("attempts") == 1
    finally:
        await queue.close()
