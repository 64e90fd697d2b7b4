"""Jobs that did not come from a service sharing the worker's key, put straight on a real
worker's queue in Redis: each is refused before anything of it runs, logged with its
source and moved to the dead-letter stream; a job the service signed runs beside them."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis

from simrun.core.signing import JobKey
from simrun.core.wire import serialize
from simrun.queues.client import JobQueue, dead_letter_counts
from simrun.queues.connect import RedisTimeouts, open_redis
from simrun.queues.keys import JOB_FUNCTION, Keys
from tests.support.harness import all_reports, make_container, make_spec
from tests.support.keys import TEST_KEY

pytestmark = pytest.mark.e2e

OTHER_KEY = JobKey.parse(b"not-the-key-of-this-worker-" + b"x" * 16, "an attacker's key")


async def _enqueue_raw(pool: ArqRedis, keys: Keys, job_id: str, payload: dict[str, Any]) -> None:
    job = await pool.enqueue_job(
        JOB_FUNCTION, payload, _job_id=keys.arq_job_id(job_id), _queue_name=keys.queue("cpu")
    )
    assert job is not None


async def test_unsigned_and_foreign_jobs_are_refused_before_they_run(
    redis_url: str, redis_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain msgpack command job (no signature) and one signed with another key never run
    their command (the file they would touch is never made); each refusal is one error
    line naming the queue and the job, and an entry of the dead-letter stream with its
    reason; the worker goes on and runs the signed job queued with them."""
    keys = Keys(redis_prefix)
    target = tmp_path / "pwned"
    forged = make_spec(tmp_path, "evil", "test-noop", kind="command")
    payload = {**forged.to_dict(), "command": f"touch {target}"}
    unsigned = open_redis(redis_url, RedisTimeouts(), TEST_KEY)
    unsigned.job_serializer = serialize  # what anyone with access to Redis can send
    foreign = open_redis(redis_url, RedisTimeouts(), OTHER_KEY)
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    good = make_spec(tmp_path, "fine", "test-noop", [0, 1])
    try:
        await _enqueue_raw(unsigned, keys, "forged-unsigned", payload)
        await _enqueue_raw(foreign, keys, "forged-foreign", payload)
        assert await queue.enqueue(good)
        caplog.set_level(logging.ERROR, logger="simrun.worker.container")
        worker = make_container(redis_url, redis_prefix, store=tmp_path)
        await asyncio.wait_for(worker.run(), 60)
        reports = await all_reports(queue)
        letters = await queue.redis.xrange(keys.dead_letters)
        counts = await dead_letter_counts(queue.redis, keys)
    finally:
        await queue.close()
        await unsigned.aclose()
        await foreign.aclose()

    assert not target.exists()
    assert set(reports) == {good.job_id}
    assert reports[good.job_id].outcomes == {0: "done", 1: "done"}
    by_source = {f[b"source"].decode(): f for _, f in letters}
    assert set(by_source) == {
        f"queue cpu, arq job {keys.arq_job_id('forged-unsigned')}",
        f"queue cpu, arq job {keys.arq_job_id('forged-foreign')}",
    }
    reasons = {s.rsplit(" ", 1)[1]: f[b"reason"].decode() for s, f in by_source.items()}
    assert "unsigned job payload" in reasons[keys.arq_job_id("forged-unsigned")]
    assert "signed with another key" in reasons[keys.arq_job_id("forged-foreign")]
    assert all(f[b"kind"] == b"job" for f in by_source.values())
    assert counts == {"job": 2}
    refusals = [r.getMessage() for r in caplog.records if "refused a job" in r.getMessage()]
    assert len(refusals) == 2
    assert any(keys.arq_job_id("forged-foreign") in line for line in refusals)


async def test_a_pickled_job_is_refused_unread(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A pickle put on the queue (arq's default format: unpickling runs code) is refused by
    its header, never unpickled: the object whose unpickling would make a file never runs."""
    import pickle

    keys = Keys(redis_prefix)
    target = tmp_path / "unpickled"

    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (target,))

    pool = open_redis(redis_url, RedisTimeouts(), TEST_KEY)
    pool.job_serializer = pickle.dumps
    try:
        await pool.enqueue_job(
            JOB_FUNCTION, Boom(), _job_id=keys.arq_job_id("pickled"), _queue_name=keys.queue("cpu")
        )
        worker = make_container(redis_url, redis_prefix)
        await asyncio.wait_for(worker.run(), 60)
        letters = await pool.xrange(keys.dead_letters)
    finally:
        await pool.aclose()
    assert not target.exists()
    ((_, fields),) = letters
    assert b"pickle" in fields[b"reason"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SIMRUN_JOB_KEY": "short"}, "the job key of SIMRUN_JOB_KEY has 5 characters"),
        ({"SIMRUN_JOB_KEY_FILE": "/nonexistent/simrun.key"}, "cannot read the job key file"),
    ],
)
@pytest.mark.parametrize("command", ["worker", "service"])
def test_a_bad_key_stops_the_process_at_start_in_one_line(
    command: str, env: dict[str, str], message: str, tmp_path: Path
) -> None:
    """A key too short or a key file that is missing stops the service and the worker at
    start with one line naming it (no traceback), before Redis is even tried."""
    import os
    import subprocess
    import sys

    given = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_JOB_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "simrun.cli", command, "--store", str(tmp_path),
         "--redis-url", "redis://127.0.0.1:1/0"],
        env={**given, **env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0]
    assert "Traceback" not in done.stderr
