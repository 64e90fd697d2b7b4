"""The heartbeat of a worker container: its `WorkerInfo` every ``interval_s`` under a key that
expires after ``ttl_s``, and its id in the index of workers; beats wait while Redis is away.
Each beat measures the worker's clock against the Redis server's (``clock_skew_s``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from simrun.core.clock import SYSTEM_CLOCK, Clock
from simrun.core.reports import WorkerInfo
from simrun.core.timing import HEARTBEAT_S, HEARTBEAT_TTL_S, clock_skew_warning
from simrun.queues.keys import Keys

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from simrun.worker.link import RedisLink

log = logging.getLogger(__name__)


class Heartbeat:
    """Writes ``info()`` every ``interval_s`` under a key that expires after ``ttl_s``."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        info: Callable[[], WorkerInfo],
        *,
        interval_s: float = HEARTBEAT_S,
        ttl_s: float = HEARTBEAT_TTL_S,
        clock: Clock = SYSTEM_CLOCK,
        link: RedisLink | None = None,
    ) -> None:
        if not 0 < interval_s < ttl_s:
            raise ValueError(f"heartbeat: need 0 < interval_s < ttl_s, got {interval_s}, {ttl_s}")
        self.redis, self.keys, self.info = redis, keys, info
        self.interval_s, self.ttl_s, self.clock = interval_s, ttl_s, clock
        self.link = link
        #: The skew measured last (seconds; None before the first beat).
        self.clock_skew_s: float | None = None
        self._skew_warned = False

    async def measure_skew(self) -> float:
        """This worker's clock minus the Redis server's (``TIME``), taken at the midpoint of
        the round trip (seconds)."""
        before = self.clock.now()
        seconds, micros = await self.redis.time()
        after = self.clock.now()
        return (before + after) / 2 - (int(seconds) + int(micros) / 1e6)

    def _judge_skew(self, worker_id: str, skew_s: float) -> None:
        """Warn once when the skew goes past the bound (again after it came back)."""
        warning = clock_skew_warning(skew_s)
        if warning is not None and not self._skew_warned:
            log.warning("worker %s: %s (times it reports are off by as much)", worker_id, warning)
        self._skew_warned = warning is not None

    async def beat(self) -> None:
        """Write the heartbeat once, with the clock skew measured now."""
        info = self.info()
        skew_s = await self.measure_skew()
        self.clock_skew_s = skew_s
        self._judge_skew(info.id, skew_s)
        info = info.model_copy(update={"clock_skew_s": round(skew_s, 4)})
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.worker(info.id), info.to_json(), px=int(self.ttl_s * 1000))
            pipe.zadd(self.keys.workers, {info.id: info.updated})
            await pipe.execute()

    async def run(self) -> None:
        """Beat until cancelled; a failed beat tells the link (or is logged)."""
        while True:
            link = self.link
            if link is not None:
                link.write_status()
            if link is None or link.is_up:
                try:
                    await self.beat()
                    if link is not None:
                        await link.check_server()
                except (RedisError, OSError) as exc:
                    if link is None:
                        log.warning("heartbeat failed: %s", exc)
                    else:
                        link.lost(exc)
            await self.clock.sleep(self.interval_s)

    async def clear(self, worker_id: str) -> None:
        """Remove the heartbeat (a worker that stops cleanly)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.worker(worker_id))
            pipe.zrem(self.keys.workers, worker_id)
            await pipe.execute()
