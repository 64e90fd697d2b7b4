"""The claim of a service on its Redis key prefix (`simrun.service.main.RedisClaim`) on a
real Redis: one holder at a time, taken over from a process of this host that is gone or
once expired, refreshed, deleted only by its holder; and the controller's loop that holds
it ends when another service holds it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import uuid4

import pytest
import redis.asyncio as aioredis

from simrun.queues.keys import Keys
from simrun.service.controller import Controller
from simrun.service.main import NamespaceInUse, RedisClaim
from tests.support.service_harness import TYPES, settings
from tests.support.wait import until


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    found = aioredis.Redis.from_url(redis_url)
    try:
        yield found
    finally:
        await found.aclose()


def _claim(client: aioredis.Redis, prefix: str, ttl_s: float = 5, **given: object) -> RedisClaim:
    """A claim of this process, or, ``given`` its pid and more, as that process would make
    it (the rest of its identity this process's)."""
    mine = RedisClaim(client, Keys(prefix), ttl_s, Path("/store"), "redis://test")
    if not given:
        return mine
    identity = {**mine.identity, "token": uuid4().hex, **given}
    return RedisClaim(client, Keys(prefix), ttl_s, Path("/store"), "redis://test", identity)


def _dead_pid() -> int:
    """The pid of a process of this host that ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


async def test_one_holder_at_a_time_and_only_the_holder_deletes_it(
    client: aioredis.Redis, redis_prefix: str
) -> None:
    """A second claim on a held prefix raises `NamespaceInUse` naming the holder's pid, host
    and store; the holder refreshes its own; the refused one's release deletes nothing,
    the holder's deletes the claim, and then the other takes it."""
    first = _claim(client, redis_prefix, pid=111, host="elsewhere")
    second = _claim(client, redis_prefix)
    await first.keep()
    with pytest.raises(NamespaceInUse) as caught:
        await second.keep()
    message = str(caught.value)
    assert "another `simrun service` (pid 111 on elsewhere since " in message
    assert f"store /store) drives the Redis key prefix {redis_prefix!r} at redis://test" in message
    await first.keep()  # a refresh
    await second.release()
    key = Keys(redis_prefix).service_lock
    assert json.loads(await client.get(key))["pid"] == 111
    await first.release()
    assert not await client.exists(key)
    await second.keep()
    assert second.held


async def test_a_holder_gone_on_this_host_is_taken_over_not_one_of_another_host(
    client: aioredis.Redis, redis_prefix: str
) -> None:
    """A claim left by a process of this host (and pid namespace) that ended is taken over
    at once; one of another host with the same pid is not, until it expired."""
    dead = _dead_pid()
    await _claim(client, redis_prefix, pid=dead).keep()
    mine = _claim(client, redis_prefix)
    await mine.keep()
    assert mine.held
    await mine.release()
    # The same dead pid in another pid namespace (another container) proves nothing: one
    # on another host is refused at once (below), one of this host in another pid
    # namespace is watched (`test_a_claim_of_this_container_before_a_restart_...`).
    other_space = _claim(client, redis_prefix, pid=dead, pidns="pid:[1]", host="elsewhere")
    await other_space.keep()
    with pytest.raises(NamespaceInUse):
        await _claim(client, redis_prefix).keep()
    await other_space.release()
    await _claim(client, redis_prefix, ttl_s=0.3, pid=dead, host="elsewhere").keep()
    other = _claim(client, redis_prefix)
    with pytest.raises(NamespaceInUse):
        await other.keep()
    key = Keys(redis_prefix).service_lock

    async def expired() -> bool:
        return not await client.exists(key)

    await until(expired, timeout_s=10, what="the claim to expire")
    await other.keep()
    assert other.held


async def test_the_refresh_moves_the_expiry(client: aioredis.Redis, redis_prefix: str) -> None:
    """`keep` of the holder sets the expiry to its TTL again."""
    claim = _claim(client, redis_prefix, ttl_s=60)
    key = Keys(redis_prefix).service_lock
    await claim.keep()
    await client.pexpire(key, 1000)
    await claim.keep()
    assert await client.pttl(key) > 50_000


async def test_the_loop_of_a_controller_whose_prefix_is_held_ends_refused(
    tmp_path: Path, redis_url: str, redis_prefix: str, client: aioredis.Redis
) -> None:
    """A controller holding a claim (`Controller.hold`) whose prefix another service holds:
    its loop ends with `NamespaceInUse` once Redis answers, instead of dispatching."""
    await _claim(client, redis_prefix, pid=7, host="elsewhere").keep()
    controller = await Controller.open(settings(tmp_path / "store", redis_url, redis_prefix), TYPES)
    try:
        controller.hold(_claim(controller.queue.redis, redis_prefix))
        with pytest.raises(NamespaceInUse, match="pid 7 on elsewhere"):
            await asyncio.wait_for(controller.run_forever(asyncio.Event()), timeout=30)
    finally:
        await controller.close()


async def test_the_loop_ends_when_another_service_took_its_claim(
    tmp_path: Path, redis_url: str, redis_prefix: str, client: aioredis.Redis
) -> None:
    """A running controller keeps its claim; when another service holds it at the next
    refresh (taken while this one was away), its loop ends with `NamespaceInUse` naming
    that one, and its release leaves that claim alone."""
    controller = await Controller.open(settings(tmp_path / "store", redis_url, redis_prefix), TYPES)
    key = Keys(redis_prefix).service_lock
    try:
        claim = _claim(controller.queue.redis, redis_prefix, ttl_s=0.6)
        controller.hold(claim)
        loop = asyncio.create_task(controller.run_forever(asyncio.Event()))

        async def claimed() -> bool:
            return claim.held

        await until(claimed, timeout_s=30, what="the loop to take the claim")
        other = {"pid": 9, "host": "elsewhere", "since": 0, "store": "/b", "token": "t"}
        await client.set(key, json.dumps(other), px=60_000)
        with pytest.raises(NamespaceInUse, match="pid 9 on elsewhere"):
            await asyncio.wait_for(loop, timeout=30)
        await claim.release()
        assert json.loads(await client.get(key))["pid"] == 9
    finally:
        await controller.close()


async def test_a_claim_of_this_container_before_a_restart_is_waited_out_unless_refreshed(
    client: aioredis.Redis, redis_prefix: str
) -> None:
    """A claim of this host and boot in another pid namespace (this container before a
    restart, whose pid says nothing here) is watched: taken once it lapses unrefreshed,
    refused when its holder refreshes it meanwhile (it is alive)."""
    earlier = _claim(client, redis_prefix, ttl_s=1.0, pid=_dead_pid(), pidns="pid:[1]")
    await earlier.keep()
    mine = _claim(client, redis_prefix)
    await asyncio.wait_for(mine.keep(), timeout=10)
    assert mine.held
    await mine.release()

    alive = _claim(client, redis_prefix, ttl_s=1.5, pid=_dead_pid(), pidns="pid:[2]")
    await alive.keep()

    async def refresh() -> None:
        while True:
            await asyncio.sleep(0.3)
            await alive.keep()

    refreshing = asyncio.create_task(refresh())
    try:
        with pytest.raises(NamespaceInUse, match="another `simrun service`"):
            await asyncio.wait_for(_claim(client, redis_prefix).keep(), timeout=10)
    finally:
        refreshing.cancel()
    await alive.release()
