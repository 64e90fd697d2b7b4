"""The marks by which the service tells the workers that a task ended (its local scratch
may go), on a real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from simrun.queues.keys import Keys
from simrun.service.scratch import ENDED_TTL_S, mark_task_ended, unmark_tasks_ended


async def test_a_task_that_ended_is_marked_for_minutes_and_unmarked_when_it_runs_again(
    redis_url: str, redis_prefix: str
) -> None:
    """A done task's mark expires within ENDED_TTL_S (nothing of a run stays in Redis for
    long); a task that runs again (`simrun rerun`) has its mark taken back, so workers keep
    its new scratch."""
    keys = Keys(redis_prefix)
    redis = aioredis.from_url(redis_url)
    try:
        await mark_task_ended(redis, keys, "r1", "a")
        await mark_task_ended(redis, keys, "r1", "b")
        ttl = await redis.pttl(keys.task_ended("r1", "a"))
        assert 0 < ttl <= ENDED_TTL_S * 1000
        await unmark_tasks_ended(redis, keys, "r1", ["a"])
        assert await redis.exists(keys.task_ended("r1", "a")) == 0
        assert await redis.exists(keys.task_ended("r1", "b")) == 1
        await unmark_tasks_ended(redis, keys, "r1", [])  # nothing to take back
    finally:
        await redis.delete(keys.task_ended("r1", "b"))
        await redis.aclose()
