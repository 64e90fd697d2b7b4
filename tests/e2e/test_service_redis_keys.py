"""What a run leaves in Redis once it ended: its attempts hashes go (once no job of it is
left), arq keeps the results of its jobs for a few minutes, and the report stream holds
none of its entries.

Real parts throughout: a Redis server, the controller, SQLite files and worker containers
as child processes running the svc-work test type (tests/support/service_tasks.py);
embedded mode as the ``simrun run`` console script on a shared ``REDIS_URL``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from simrun.local.session import redis_prefix as local_prefix
from simrun.queues.keys import Keys
from simrun.service.scratch import ENDED_TTL_S
from simrun.worker.container import KEEP_RESULT_S
from tests.support.cli_harness import WORK, clean_env, simrun, write_work
from tests.support.service_harness import (
    RETRY_ONCE,
    Service,
    failing_work,
    service,
    work_doc,
    workers,
)
from tests.support.units import calls
from tests.support.wait import WaitTimeout

pytestmark = pytest.mark.e2e


async def keys_of_run(redis: aioredis.Redis, run_id: str) -> dict[str, int]:
    """Every key whose name holds the run's id (a SCAN), with its time to live in ms."""
    found: dict[str, int] = {}
    async for raw in redis.scan_iter(match=f"*{run_id}*", count=1000):
        key = raw.decode()
        found[key] = int(await redis.pttl(key))
    return found


async def attempts_of(svc: Service, run_id: str) -> list[str]:
    """The attempts hashes of a run: a SCAN of the test's prefix."""
    queue = svc.controller.queue
    found = [
        raw.decode()
        async for raw in queue.redis.scan_iter(match=queue.keys.attempts_pattern, count=1000)
    ]
    return sorted(k for k in found if queue.keys.split_attempts(k)[0] == run_id)


async def no_attempts_left(svc: Service, run_id: str) -> None:
    """Wait (10 s at most) until the run's attempts hashes are gone, then say so."""

    async def gone() -> bool:
        return await attempts_of(svc, run_id) == []

    with contextlib.suppress(WaitTimeout):  # the assertion below says what is left
        await svc.until(gone, timeout_s=10)
    assert await attempts_of(svc, run_id) == []


def only_results(found: dict[str, int], prefix: str, run_id: str) -> None:
    """What may remain of a finished run: arq's results of its jobs, each expiring within
    `KEEP_RESULT_S`, and the marks of its tasks that are done (telling the workers their
    local scratch may go, `simrun.service.scratch`), expiring within `ENDED_TTL_S`."""
    ended = Keys(prefix).task_ended(run_id, "")
    others = [k for k in found if not k.startswith((f"arq:result:{prefix}:{run_id}:", ended))]
    assert others == []
    assert all(0 < ttl <= max(KEEP_RESULT_S, ENDED_TTL_S) * 1000 for ttl in found.values()), found


async def test_a_failed_run_leaves_no_attempts_and_its_replay_still_works(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Once a run failed its attempts hashes leave Redis, and only arq's short-lived
    results of its jobs remain (no queued job, no report entry); a replay then dispatches
    its failed units with new attempts and finishes the run without computing done units
    again, after which the same holds."""
    store = tmp_path / "store"
    flag, doc = failing_work(tmp_path, [2])
    with workers(redis_url, redis_prefix, store=store):
        async with service(store, redis_url, redis_prefix, limits=RETRY_ONCE) as svc:
            run_id = await svc.submit(doc)
            failed = await svc.wait(run_id, timeout_s=60)
            await no_attempts_left(svc, run_id)
            redis = svc.controller.queue.redis
            after_failure = await keys_of_run(redis, run_id)
            flag.unlink()
            assert await svc.controller.replay(run_id) == 1
            run = await svc.wait(run_id, timeout_s=60)
            await no_attempts_left(svc, run_id)
            after_success = await keys_of_run(redis, run_id)
            stream = await redis.xlen(svc.controller.queue.keys.reports)
            queued = await svc.controller.queue.queued_job_ids("cpu")
    assert failed.state == "failed", failed.message
    assert run.state == "succeeded", run.message
    out = store / "runs" / run_id / "work" / "out"
    assert calls(out) == {0: 1, 1: 1, 2: 3, 3: 1, 4: 1, 5: 1}
    only_results(after_failure, redis_prefix, run_id)
    only_results(after_success, redis_prefix, run_id)
    assert any(":2:" in k for k in after_success)  # results are kept: they are its jobs'
    assert (stream, queued) == (0, [])


async def test_a_cancelled_run_keeps_its_attempts_until_its_stale_jobs_are_skipped(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """A run cancelled while its jobs wait in the queue: the worker skips them (at most the
    units it had already taken are computed after the cancel), and once none of its jobs
    is left in Redis its attempts hashes are gone too. (Without a probe: with one, only
    the probe's job would be out when the first unit runs.)"""
    store = tmp_path / "store"
    with workers(redis_url, redis_prefix, store=store, processes=1):
        async with service(store, redis_url, redis_prefix, probe=False) as svc:
            run_id = await svc.submit(work_doc(units=40, seconds=0.2))
            out = store / "runs" / run_id / "work" / "out"

            async def started() -> bool:
                return sum(calls(out).values()) >= 1

            await svc.until(started)
            await svc.controller.cancel(run_id)
            at_cancel = sum(calls(out).values())

            async def jobs_gone() -> bool:
                left = await svc.controller.queue.queued_job_ids("cpu")
                return not any(j.startswith(f"{run_id}:") for j in left)

            await svc.until(jobs_gone, timeout_s=30)
            await no_attempts_left(svc, run_id)
            computed = sum(calls(out).values())
    assert computed - at_cancel <= 2, "the workers ran jobs of the cancelled run"
    assert computed < 40


async def test_embedded_run_on_a_shared_redis_leaves_no_attempts(
    tmp_path: Path, redis_url: str
) -> None:
    """`simrun run` with REDIS_URL set (a shared server, keys under the store's own prefix)
    leaves no attempts hash of its run behind once it exits."""
    write_work(tmp_path / "wf.yaml", units=4, seconds=0.05)
    result = simrun(
        "run", "wf.yaml", "--plugins", WORK, cwd=tmp_path, env=clean_env(REDIS_URL=redis_url)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    keys = Keys(local_prefix(tmp_path / "simrun-store", private=False))
    client = aioredis.Redis.from_url(redis_url)
    try:
        left = [k async for k in client.scan_iter(match=keys.attempts_pattern, count=1000)]
    finally:
        await client.aclose()
    assert left == []
