"""The peer every simrun throughput figure is compared with: raw arq running no-op jobs,
tuned as ../shared/ARQ-NOTES.md measured (``poll_delay=0.01``, ``max_jobs=100``, msgpack
serializer, a burst worker), on the same Redis in the same run.

Imported by the benchmark scripts (``python benchmarks/worker.py`` puts this folder on
the path).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from arq.connections import RedisSettings, create_pool
from arq.worker import Worker

from simrun.core.wire import deserialize, serialize

__all__ = ["RawArq", "raw_arq"]


async def _noop(ctx: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class RawArq:
    jobs: int
    enqueue_s: float
    drain_s: float

    @property
    def rate(self) -> float:
        """Jobs per second from the first enqueue to the end of the worker."""
        return self.jobs / (self.enqueue_s + self.drain_s)

    @property
    def drain_rate(self) -> float:
        return self.jobs / self.drain_s


async def raw_arq(url: str, jobs: int) -> RawArq:
    """Enqueue ``jobs`` no-op jobs (32 in flight), then drain them with a tuned burst worker;
    both phases are timed."""
    queue = f"bench-arq-{uuid.uuid4().hex[:8]}"
    pool = await create_pool(
        RedisSettings.from_dsn(url), job_serializer=serialize, job_deserializer=deserialize
    )
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await pool.enqueue_job("_noop", _queue_name=queue, _job_id=f"{queue}:{i}")

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(jobs)))
    enqueued = time.perf_counter()
    worker = Worker(
        functions=[_noop],
        queue_name=queue,
        redis_pool=pool,
        burst=True,
        handle_signals=False,
        poll_delay=0.01,
        max_jobs=100,
        keep_result=60,
        job_serializer=serialize,
        job_deserializer=deserialize,
        log_results=False,
    )
    await worker.async_run()
    end = time.perf_counter()
    assert worker.jobs_complete == jobs, worker
    await worker.close()
    return RawArq(jobs, enqueued - start, end - enqueued)
