"""The worker's link to Redis (simrun.worker.link.RedisLink) against a real redis-server
that restarts: what it notices, and what it writes again."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from simrun.local.redis import PrivateRedis
from simrun.worker.link import RedisLink
from simrun.worker.spool import ReportSpool, SpoolBounds
from tests.integration.test_worker_spool import Sink, entry, holding
from tests.support.keys import TEST_KEY
from tests.support.wait import until

pytestmark = pytest.mark.redis


async def test_a_restart_too_quick_for_any_call_to_fail_has_recent_reports_written_again(
    tmp_path: Path,
) -> None:
    """When the server that answers is another one (Redis restarted, and may have lost its
    data) though no call ever failed, `check_server` (which every heartbeat calls) writes
    again the reports of the last minute, once; with the same server it writes nothing."""
    server = PrivateRedis()
    server.start()
    client = Redis.from_url(server.url)
    sink = Sink()
    link = RedisLink(
        client, server.url, ReportSpool(tmp_path / "w.spool.jsonl", TEST_KEY, SpoolBounds()), sink
    )
    try:
        await link.learn_server()
        for n in range(3):
            await link.send(entry(n))
        await link.check_server()
        assert len(sink.written) == 3  # the same server: nothing again
        server.kill()
        server.start()  # empty, on the same port
        # A fresh connection, as another client's (an arq pool's) may be: no call fails.
        await client.connection_pool.disconnect()
        await link.check_server()
        assert [e.job_id for e in sink.written[3:]] == [entry(n).job_id for n in range(3)]
        await link.check_server()
        assert len(sink.written) == 6  # written again once
    finally:
        await client.aclose()
        server.stop()


async def test_a_report_kept_while_redis_was_coming_back_is_delivered_at_once(
    tmp_path: Path,
) -> None:
    """A job that ends while the link catches up (Redis answers again, the kept reports are
    written, the heartbeat goes) has its report kept; it is delivered as soon as the link
    is up, and a later report goes after it, not behind it in the spool until the next
    outage or the worker's stop (which held a run's last units for a minute)."""
    server = PrivateRedis()
    server.start()
    client = Redis.from_url(server.url)
    sink = Sink()
    link = RedisLink(
        client,
        server.url,
        ReportSpool(tmp_path / "w.spool.jsonl", TEST_KEY, SpoolBounds()),
        sink,
        max_backoff_s=0.2,
    )
    try:
        await link.learn_server()
        await link.report(entry(0), holding(0))
        link.lost(ConnectionError("a blink"))
        await link.report(entry(1), holding(1))  # kept: Redis is away

        async def a_job_ends_meanwhile() -> None:
            await link.report(entry(2), holding(2))

        link.on_back = a_job_ends_meanwhile
        assert await link.wait_up(10)
        await until(
            lambda: len(sink.written) == 3, timeout_s=5, what="3 reports written", poll_s=0.01
        )
        assert [e.job_id for e in sink.written] == [entry(n).job_id for n in range(3)]
        assert len(link.spool) == 0
        await link.report(entry(3), holding(3))
        assert sink.written[-1].job_id == entry(3).job_id
    finally:
        await link.close()
        await client.aclose()
        server.stop()
