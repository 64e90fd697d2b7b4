"""The worker's link to Redis (simrun.worker.link.RedisLink) against a real redis-server
that restarts: what it notices, and what it writes again."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from simrun.local.redis import PrivateRedis
from simrun.worker.link import RedisLink
from simrun.worker.spool import ReportSpool, SpoolBounds
from tests.integration.test_worker_spool import Sink, entry

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
        client, server.url, ReportSpool(tmp_path / "w.spool.jsonl", SpoolBounds()), sink
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
