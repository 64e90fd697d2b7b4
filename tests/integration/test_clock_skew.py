"""Clock skew between a worker and Redis: the heartbeat measures it (the midpoint of a
``TIME`` round trip) and warns past the bound; jobs are scored back so that arq gives them
to a worker whose clock is behind."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from simrun.core.clock import SystemClock
from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.reports import WorkerInfo
from simrun.core.timing import CLOCK_SKEW_WARN_S, ENQUEUE_BACKDATE_S, clock_skew_warning
from simrun.plugins import TaskPaths
from simrun.queues.client import JobQueue
from simrun.worker.heartbeat import Heartbeat
from tests.support.heartbeats import worker_info

pytestmark = pytest.mark.redis


class LateClock(SystemClock):
    """The system clock, ``behind_s`` seconds behind."""

    def __init__(self, behind_s: float) -> None:
        self.behind_s = behind_s

    def now(self) -> float:
        return time.time() - self.behind_s


def _spec(first: int) -> JobSpec:
    return JobSpec(
        kind="chunk", run="r1", task="sweep", task_type="heat", settings={},
        paths=JobPaths.of(TaskPaths.for_task(Path("/store"), "r1", "sweep")),
        resources=JobResources(memory_base_gb=0.5, memory_per_worker_gb=1.0),
        attempt=1, indices=(first,),
    )  # fmt: skip


async def test_the_heartbeat_carries_the_skew_and_warns_once(
    queue: JobQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose clock is 45 s behind writes ``clock_skew_s`` of about -45 in its
    heartbeat, and logs one warning over several beats."""
    caplog.set_level(logging.WARNING)
    beats = Heartbeat(queue.redis, queue.keys, lambda: worker_info("late"), clock=LateClock(45))
    for _ in range(3):
        await beats.beat()
    raw = await queue.redis.get(queue.keys.worker("late"))
    skew = WorkerInfo.from_json(raw).clock_skew_s
    assert skew is not None
    assert abs(skew + 45) < 1.0, skew
    lines = [r.getMessage() for r in caplog.records if "behind Redis" in r.getMessage()]
    assert len(lines) == 1, lines


def test_the_warning_names_the_skew_past_the_bound() -> None:
    """No warning within `CLOCK_SKEW_WARN_S` (or unmeasured); past it, how far and which
    way; past `ENQUEUE_BACKDATE_S` behind, that jobs wait."""
    assert clock_skew_warning(None) is None
    assert clock_skew_warning(CLOCK_SKEW_WARN_S) is None
    assert "6.0 s ahead of" in str(clock_skew_warning(6.0))
    assert "45.0 s behind" in str(clock_skew_warning(-45.0))
    assert "takes a job only 100 s after" in str(clock_skew_warning(-ENQUEUE_BACKDATE_S - 100))


async def test_jobs_are_scored_back_in_their_order(queue: JobQueue) -> None:
    """A job is scored `ENQUEUE_BACKDATE_S` before it was enqueued (a worker up to that far
    behind takes it), and jobs keep the order they were enqueued in."""
    before_ms = time.time() * 1000
    for first in range(5):
        assert await queue.enqueue(_spec(first))
    after_ms = time.time() * 1000
    scored = await queue.redis.zrange(queue.keys.queue("cpu"), 0, -1, withscores=True)
    ids = [queue.keys.job_id_from_arq(j.decode()) for j, _ in scored]
    assert ids == [f"r1:sweep:{i}:1" for i in range(5)]
    backdate_ms = ENQUEUE_BACKDATE_S * 1000
    assert all(before_ms - backdate_ms - 1 <= s <= after_ms - backdate_ms + 1 for _, s in scored)
    # arq's own expiry of the job is not shortened by the earlier score (a day)
    ttl = await queue.redis.pttl(f"arq:job:{queue.keys.arq_job_id('r1:sweep:0:1')}")
    assert ttl > 23.9 * 3600 * 1000
