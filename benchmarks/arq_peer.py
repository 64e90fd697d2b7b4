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


async def _noop_batch(ctx: dict[str, Any], units: int) -> int:
    """A hand-batched job: ``units`` no-op units in a row."""
    for _ in range(units):
        await _noop(ctx)
    return units


@dataclass(frozen=True)
class RawArq:
    """``jobs`` units (one job each, or ``per_job`` to a job when batched by hand)."""

    jobs: int
    enqueue_s: float
    drain_s: float
    per_job: int = 1

    @property
    def rate(self) -> float:
        """Units per second from the first enqueue to the end of the worker."""
        return self.jobs / (self.enqueue_s + self.drain_s)

    @property
    def drain_rate(self) -> float:
        return self.jobs / self.drain_s


async def raw_arq(url: str, jobs: int, per_job: int = 1) -> RawArq:
    """Enqueue ``jobs`` no-op units (32 jobs in flight), one per job or ``per_job`` to a job
    (the last one shorter), then drain them with a tuned burst worker; both phases are
    timed."""
    queue = f"bench-arq-{uuid.uuid4().hex[:8]}"
    pool = await create_pool(
        RedisSettings.from_dsn(url), job_serializer=serialize, job_deserializer=deserialize
    )
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            if per_job == 1:
                await pool.enqueue_job("_noop", _queue_name=queue, _job_id=f"{queue}:{i}")
            else:
                units = min(per_job, jobs - i)
                await pool.enqueue_job(
                    "_noop_batch", units, _queue_name=queue, _job_id=f"{queue}:{i}"
                )

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(0, jobs, per_job)))
    enqueued = time.perf_counter()
    worker = Worker(
        functions=[_noop, _noop_batch],
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
    assert worker.jobs_complete == len(range(0, jobs, per_job)), worker
    await worker.close()
    return RawArq(jobs, enqueued - start, end - enqueued, per_job)
