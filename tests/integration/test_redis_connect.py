"""`wait_for_redis` against real sockets: a port nobody listens on, then a private
redis-server started on it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from simrun.core.outage import LinkState
from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis
from simrun.queues.connect import RedisTimeouts, RedisUnusable, open_redis, wait_for_redis
from tests.support.keys import TEST_KEY


async def test_redis_that_answers_is_not_waited_for(private_redis: PrivateRedis) -> None:
    """A Redis that answers the first PING: no wait (None), nothing logged."""
    client = open_redis(private_redis.url, RedisTimeouts(), TEST_KEY)
    try:
        assert await wait_for_redis(client, "here") is None
    finally:
        await client.aclose()


async def test_waiting_for_redis_gives_up_after_the_time_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listening: several tries, one "waiting for Redis" line, ``on_try`` after
    each, and `RedisUnusable` naming the bound once it passed."""
    caplog.set_level(logging.INFO, logger="simrun.queues.connect")
    tries: list[int] = []

    def on_try(state: LinkState) -> None:
        assert not state.up
        tries.append(state.failures)

    client = open_redis(
        f"redis://127.0.0.1:{free_port()}/0", RedisTimeouts(connect_s=1.0), TEST_KEY
    )
    try:
        with pytest.raises(RedisUnusable, match=r"within 1\.5 s"):
            await wait_for_redis(client, "there", max_wait_s=1.5, on_try=on_try)
    finally:
        await client.aclose()
    assert len(tries) >= 3, tries
    waiting = [r for r in caplog.records if "waiting for Redis at there" in r.getMessage()]
    assert len(waiting) == 1, [r.getMessage() for r in caplog.records]


async def test_redis_started_while_waited_for_is_connected() -> None:
    """Nothing listening on the port at first; a redis-server started there a little later
    is connected, and the time waited is returned."""
    server = PrivateRedis()
    server.port = free_port()
    client = open_redis(f"redis://127.0.0.1:{server.port}/0", RedisTimeouts(), TEST_KEY)
    try:
        waiting = asyncio.create_task(wait_for_redis(client, "late", max_backoff_s=0.5))
        await asyncio.sleep(1.0)  # under test: a second with nothing there, still waiting
        assert not waiting.done()
        await asyncio.to_thread(server.start)
        waited = await asyncio.wait_for(waiting, 10)
        assert waited is not None
        assert waited >= 0.9
    finally:
        await client.aclose()
        server.stop()
