"""Entries in Redis this version cannot read (a garbage heartbeat, an attempt that is not an
integer) are quarantined: moved to the dead-letter stream, counted, deleted, logged once;
nothing that reads them fails."""

from __future__ import annotations

import logging
from typing import cast

import httpx
import pytest

from simrun.queues.client import JobQueue, current_attempts, dead_letter_counts
from simrun.service.controller import Controller
from tests.support.heartbeats import worker_info

pytestmark = pytest.mark.redis

#: Heartbeat values that cannot be read: not JSON, JSON without the fields, not UTF-8.
POISONS = [b"garbage", b'{"id": "w9"}', b"\xff\xfe{\x80"]


async def poison(queue: JobQueue, worker_id: str, raw: bytes) -> None:
    """A heartbeat key holding ``raw`` with its id in the workers' index, as a worker's."""
    await queue.redis.set(queue.keys.worker(worker_id), raw, px=60_000)
    await queue.redis.zadd(queue.keys.workers, {worker_id: 1.0})


async def beat(queue: JobQueue, worker_id: str) -> None:
    info = worker_info(worker_id)
    await queue.redis.set(queue.keys.worker(worker_id), info.to_json(), px=60_000)
    await queue.redis.zadd(queue.keys.workers, {worker_id: 1.0})


def warnings_of(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and text in r.getMessage()
    ]


@pytest.mark.parametrize("raw", POISONS, ids=["not-json", "wrong-fields", "not-utf8"])
async def test_an_unreadable_heartbeat_is_quarantined_once(
    queue: JobQueue, raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """`live_workers` lists the readable workers and quarantines an unreadable heartbeat:
    its key deleted, its id out of the index, one dead letter of kind heartbeat naming the
    key, one warning line; reading again finds nothing more to quarantine."""
    caplog.set_level(logging.WARNING)
    await beat(queue, "w1")
    await poison(queue, "w9", raw)
    assert [w.id for w in await queue.live_workers()] == ["w1"]
    assert await queue.redis.exists(queue.keys.worker("w9")) == 0
    assert await queue.redis.zscore(queue.keys.workers, "w9") is None
    assert (await dead_letter_counts(queue.redis, queue.keys)).get("heartbeat") == 1
    ((_, fields),) = await queue.redis.xrange(queue.keys.dead_letters)
    assert fields[b"kind"] == b"heartbeat"
    assert fields[b"source"] == queue.keys.worker("w9").encode()
    assert [w.id for w in await queue.live_workers()] == ["w1"]
    assert (await dead_letter_counts(queue.redis, queue.keys)).get("heartbeat") == 1
    assert len(warnings_of(caplog, "w9")) == 1, caplog.text


async def test_a_worker_that_beat_again_keeps_its_new_heartbeat(queue: JobQueue) -> None:
    """The poisoned value is deleted only while the key still holds it: a worker that beat
    since it was read keeps its beat and stays in the index, and nothing is counted."""
    await poison(queue, "w1", b"garbage")
    await beat(queue, "w1")
    assert await queue.drop_heartbeat("w1", b"garbage", "test") is False
    assert [w.id for w in await queue.live_workers()] == ["w1"]
    assert await dead_letter_counts(queue.redis, queue.keys) == {}


async def test_a_worker_id_that_is_not_utf8_is_quarantined(queue: JobQueue) -> None:
    """A member of the workers' index that is not UTF-8 is taken out and quarantined; the
    other workers are listed."""
    await beat(queue, "w1")
    await queue.redis.zadd(queue.keys.workers, {b"\xff\xfe": 1.0})
    assert [w.id for w in await queue.live_workers()] == ["w1"]
    assert await queue.redis.zcard(queue.keys.workers) == 1
    assert (await dead_letter_counts(queue.redis, queue.keys)).get("heartbeat") == 1


async def test_an_attempt_that_is_not_an_integer_is_quarantined(
    queue: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """An attempts-hash value that is not an integer is quarantined (kind attempts), its
    field deleted, and its unit has no attempt recorded; the readable ones are read."""
    caplog.set_level(logging.WARNING)
    name = queue.keys.attempts("r1", "sweep")
    await queue.redis.hset(name, mapping={"0": "2", "1": "two", "2": b"\xff"})
    found = await current_attempts(queue.redis, queue.keys, "r1", "sweep", [0, 1, 2])
    assert found == {0: 2}
    assert await queue.redis.hkeys(name) == [b"0"]
    assert (await dead_letter_counts(queue.redis, queue.keys)).get("attempts") == 2
    assert await current_attempts(queue.redis, queue.keys, "r1", "sweep", [0, 1, 2]) == {0: 2}
    assert (await dead_letter_counts(queue.redis, queue.keys)).get("attempts") == 2
    assert len(warnings_of(caplog, "not an integer")) == 2, caplog.text


async def test_a_poisoned_heartbeat_stops_no_step_and_no_route(
    controller: Controller, api: httpx.AsyncClient
) -> None:
    """With a garbage heartbeat in Redis a controller step goes through, and /health,
    /workers, /backlog and /metrics answer 200 (the live worker listed, the dead letter
    counted in /metrics)."""
    queue = controller.queue
    await beat(queue, "w1")
    await poison(queue, "w9", b"garbage")
    await controller.step()
    assert controller.last_error is None
    await poison(queue, "w8", b"garbage")  # one the routes find themselves
    for path in ("/health", "/workers", "/backlog", "/metrics"):
        answer = await api.get(path)
        assert answer.status_code == 200, (path, answer.text)
    workers = cast("list[dict[str, object]]", (await api.get("/workers")).json()["workers"])
    assert [w["id"] for w in workers] == ["w1"]
    assert (await api.get("/health")).json()["workers"] == 1
    text = (await api.get("/metrics")).text
    assert 'simrun_dead_letters{kind="heartbeat"} 2.0' in text, text
