"""simrun.queues against a real Redis: enqueueing, attempts, the report stream, heartbeats."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from arq.worker import Worker, func

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.reports import ReportEntry, RunningJob, WorkerInfo, WorkerReport
from simrun.core.signing import JobCodec
from simrun.core.wire import PayloadError, serialize
from simrun.local.redis import PrivateRedis
from simrun.plugins import TaskPaths
from simrun.queues.client import JobQueue, current_attempts, set_current_attempts
from simrun.queues.keys import JOB_FUNCTION, Keys
from simrun.worker.heartbeat import Heartbeat
from tests.support.heartbeats import worker_info
from tests.support.keys import TEST_KEY
from tests.support.wait import until

pytestmark = pytest.mark.redis


def _spec(first: int, attempt: int = 1, gpus: int = 0) -> JobSpec:
    return JobSpec(
        kind="chunk",
        run="r1",
        task="sweep",
        task_type="heat",
        settings={"grid": 8},
        paths=JobPaths.of(TaskPaths.for_task(Path("/store"), "r1", "sweep")),
        resources=JobResources(memory_base_gb=0.5, memory_per_worker_gb=1.0, gpus=gpus),
        attempt=attempt,
        indices=(first, first + 1),
    )


async def test_enqueue_is_idempotent_per_job_id(queue: JobQueue) -> None:
    """A job id is enqueued once: the same job again is refused (False), a newer attempt of
    the same units is a new job; jobs land on the queue of their resources, as msgpack
    signed with the queue's key."""
    assert await queue.enqueue(_spec(0)) is True
    assert await queue.enqueue(_spec(0)) is False
    assert await queue.enqueue(_spec(0, attempt=2)) is True
    assert await queue.enqueue(_spec(10, gpus=1)) is True
    assert sorted(await queue.queued_job_ids("cpu")) == ["r1:sweep:0:1", "r1:sweep:0:2"]
    assert await queue.queued_job_ids("gpu") == ["r1:sweep:10:1"]
    raw = await queue.redis.get(f"arq:job:{queue.keys.arq_job_id('r1:sweep:0:1')}")
    assert raw is not None
    payload = JobCodec(TEST_KEY).deserialize(raw)
    assert JobSpec.from_dict(payload["a"][0]) == _spec(0)
    with pytest.raises(PayloadError, match="unsigned"):
        JobCodec(TEST_KEY).deserialize(serialize(payload))


async def test_dropped_jobs_leave_the_queue_and_arq(queue: JobQueue) -> None:
    """drop_jobs removes jobs from their queue and arq's job key, counts only those that
    were queued, and leaves other jobs alone; a dropped id can be enqueued again."""
    assert await queue.enqueue_many([_spec(0), _spec(2), _spec(4)]) == [True] * 3
    assert await queue.drop_jobs("cpu", ["r1:sweep:0:1", "r1:sweep:2:1", "nope"]) == 2
    assert await queue.queued_job_ids("cpu") == ["r1:sweep:4:1"]
    assert await queue.redis.exists(f"arq:job:{queue.keys.arq_job_id('r1:sweep:0:1')}") == 0
    assert await queue.drop_jobs("cpu", []) == 0
    assert await queue.enqueue(_spec(0)) is True


async def test_held_in_progress_names_the_jobs_an_arq_worker_took(
    queue: JobQueue, redis_url: str
) -> None:
    """held_in_progress names exactly the given jobs that a real arq worker took and has not
    ended (arq's in-progress mark); a job waiting in the queue, an unknown id, a finished
    job and a dropped job are not held."""
    gates = [asyncio.Event(), asyncio.Event()]  # the n-th job taken ends when gate n opens
    taken: list[int] = []

    async def job(ctx: dict[str, Any], payload: object) -> None:
        taken.append(len(taken))
        await gates[taken[-1]].wait()

    async def until_taken(n: int) -> None:
        what = f"the worker to take job {n}"
        await until(lambda: len(taken) >= n, timeout_s=5, what=what, poll_s=0.01)

    assert await queue.enqueue(_spec(0))
    worker_pool = (await JobQueue.connect(redis_url, queue.keys.prefix, key=TEST_KEY)).pool
    worker = Worker(  # a real arq worker on a pool of its own (it closes it)
        functions=[func(job, name=JOB_FUNCTION)],
        queue_name=queue.keys.queue("cpu"),
        redis_pool=worker_pool,
        handle_signals=False,
        burst=True,  # it ends once its queue is empty and its jobs ended
        max_jobs=1,
        poll_delay=0.01,
        job_serializer=JobCodec(TEST_KEY).serialize,
        job_deserializer=JobCodec(TEST_KEY).deserialize,
    )
    running = asyncio.ensure_future(worker.async_run())
    try:
        await until_taken(1)
        assert await queue.enqueue(_spec(2))  # waits: the worker runs one job at a time
        ids = ["r1:sweep:0:1", "r1:sweep:2:1", "nope"]
        assert await queue.held_in_progress(ids) == {"r1:sweep:0:1"}
        assert await queue.held_in_progress([]) == set()
        gates[0].set()
        await until_taken(2)
        assert await queue.held_in_progress(ids) == {"r1:sweep:2:1"}  # the first one ended
        assert await queue.drop_jobs("cpu", ["r1:sweep:2:1"]) == 1
        assert await queue.held_in_progress(ids) == set()
    finally:
        for gate in gates:
            gate.set()
        await queue.drop_jobs("cpu", ["r1:sweep:0:1", "r1:sweep:2:1"])
        await asyncio.wait_for(running, 10)
        await worker.close()


async def test_enqueue_many_keeps_order_and_bounds_concurrency(queue: JobQueue) -> None:
    """enqueue_many answers per job in the order given (False for a duplicate) and refuses a
    concurrency below one."""
    specs = [_spec(i * 2) for i in range(50)]
    assert await queue.enqueue_many([*specs, specs[3]], concurrency=8) == [True] * 50 + [False]
    assert len(await queue.queued_job_ids("cpu")) == 50
    with pytest.raises(ValueError, match="concurrency"):
        await queue.enqueue_many(specs, concurrency=0)


async def test_current_attempts_missing_means_current(queue: JobQueue) -> None:
    """The attempts hash gives the recorded attempt per unit and nothing for units never
    recorded (which then count as current); an attempt 1 (a first dispatch) is not
    written, as none recorded already means current."""
    keys = queue.keys
    await set_current_attempts(queue.redis, keys, "r1", "sweep", {0: 2, 1: 1, "merge": 4})
    found = await current_attempts(queue.redis, keys, "r1", "sweep", [0, 1, 2, "merge"])
    assert found == {0: 2, "merge": 4}
    assert await queue.redis.hlen(keys.attempts("r1", "sweep")) == 2
    assert await current_attempts(queue.redis, keys, "r1", "other", [0]) == {}
    assert await current_attempts(queue.redis, keys, "r1", "sweep", []) == {}


def _entry(job: str, **changes: Any) -> ReportEntry:
    fields: dict[str, Any] = {
        "job_id": job,
        "run": "r1",
        "task": "sweep",
        "kind": "chunk",
        "attempt": 1,
        "worker_id": "w",
        "outcomes": {0: "done"},
        "report": WorkerReport(peak_memory_gb=(0.1,), seconds_per_unit=0.2, units=1, limit_gb=1.0),
        "started": 1.0,
        "finished": 2.0,
    }
    fields.update(changes)
    return ReportEntry(**fields)


async def test_reports_are_read_in_a_group_acked_and_redelivered_when_not(
    queue: JobQueue,
) -> None:
    """Reports come out in order; an entry read but not acknowledged comes back as pending
    (a service that crashed before its commit); acknowledged entries leave the stream; an
    unreadable entry is delivered with its problem instead of blocking the others."""
    stream = queue.keys.reports
    await queue.redis.xadd(stream, _entry("a").to_fields(TEST_KEY))  # type: ignore[arg-type]
    await queue.redis.xadd(stream, {"v": "1", "job_id": "broken"})
    await queue.redis.xadd(stream, _entry("b").to_fields(TEST_KEY))  # type: ignore[arg-type]

    batch = await queue.read_reports("svc", "c1", count=10, block_ms=100)
    assert len(batch) == 3
    assert batch[0].entry == _entry("a")
    assert batch[1].entry is None
    assert batch[1].problem is not None
    assert "'broken'" in batch[1].problem
    assert batch[2].entry == _entry("b")
    assert await queue.read_reports("svc", "c1", count=10, block_ms=50) == []

    pending = await queue.read_reports("svc", "c1", pending=True)
    assert [r.id for r in pending] == [r.id for r in batch]
    await queue.ack("svc", [r.id for r in batch])
    assert await queue.read_reports("svc", "c1", pending=True) == []
    assert await queue.redis.xlen(stream) == 0


async def _group_creations(queue: JobQueue) -> int:
    stats = await queue.redis.info("commandstats")
    return int(stats.get("cmdstat_xgroup|create", {}).get("calls", 0))


async def test_report_group_is_created_once_and_again_after_redis_lost_it(
    private_redis: PrivateRedis, redis_prefix: str
) -> None:
    """Reading reports creates the consumer group on the first read of a JobQueue only (not
    on every read), and once more after Redis lost it (a flush): the reads go on and
    deliver what was written since. A private server, so that its command counts are ours."""
    queue = await JobQueue.connect(private_redis.url, redis_prefix, key=TEST_KEY)
    try:
        stream = queue.keys.reports
        await queue.redis.xadd(stream, _entry("a").to_fields(TEST_KEY))  # type: ignore[arg-type]
        assert [r.entry for r in await queue.read_reports("svc", "c1", block_ms=None)] == [
            _entry("a")
        ]
        for _ in range(5):
            assert await queue.read_reports("svc", "c1", block_ms=None) == []
            assert await queue.read_reports("svc", "c1", pending=True) != []
        assert await _group_creations(queue) == 1

        await queue.redis.flushall()
        await queue.redis.xadd(stream, _entry("b").to_fields(TEST_KEY))  # type: ignore[arg-type]
        after = await queue.read_reports("svc", "c1", block_ms=None)
        assert [r.entry for r in after] == [_entry("b")]
        assert await queue.read_reports("svc", "c1", block_ms=None) == []
        assert await _group_creations(queue) == 2
    finally:
        await queue.close()


async def test_live_workers_come_and_go_with_their_heartbeat(
    queue: JobQueue, redis_url: str
) -> None:
    """A heartbeat lists its worker among the live ones with what it said and the clock
    skew it measured; a worker whose heartbeat stops disappears once its key expires, and
    a cleared one at once."""

    def info(worker_id: str) -> WorkerInfo:
        running = (RunningJob.of(_spec(0), "running"),)
        return worker_info(
            worker_id, memory_gb=4.0, free_memory_gb=3.0, free_processes=1, running=running,
            updated=1.0,
        )  # fmt: skip

    fast = Heartbeat(queue.redis, queue.keys, lambda: info("w1"), interval_s=0.05, ttl_s=0.3)
    task = asyncio.create_task(fast.run())
    other = Heartbeat(queue.redis, queue.keys, lambda: info("w2"))
    await other.beat()

    async def live() -> list[str]:
        return sorted(w.id for w in await queue.live_workers())

    async def both() -> bool:
        return await live() == ["w1", "w2"]

    async def only_w2() -> bool:
        return await live() == ["w2"]

    try:  # the first beats, however loaded the machine
        await until(both, timeout_s=10, what="the first beats of w1 and w2")
        (seen,) = [w for w in await queue.live_workers() if w.id == "w1"]
        # The beat adds the skew it measured against this Redis (on this machine: ~0 s).
        assert seen.clock_skew_s is not None
        assert abs(seen.clock_skew_s) < 1.0
        assert seen.model_copy(update={"clock_skew_s": None}) == info("w1")
    finally:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # The key expires 0.3 s after the last beat; a loaded machine may take longer to say so.
    await until(only_w2, timeout_s=10, what="w1's heartbeat to expire")
    await other.clear("w2")
    assert await queue.live_workers() == []
    assert await queue.redis.zcard(queue.keys.workers) == 0


async def test_namespaces_do_not_see_each_other(queue: JobQueue, redis_url: str) -> None:
    """The same job id under two prefixes is two jobs on two queues."""
    other = await JobQueue.connect(redis_url, queue.keys.prefix + "-other", key=TEST_KEY)
    try:
        assert await queue.enqueue(_spec(0)) is True
        assert await other.enqueue(_spec(0)) is True
        assert await other.queued_job_ids("cpu") == ["r1:sweep:0:1"]
        assert Keys(queue.keys.prefix).queue("cpu") != other.keys.queue("cpu")
    finally:
        await other.close()


async def test_an_entry_moved_aside_keeps_its_reason_source_and_a_bounded_raw(
    queue: JobQueue,
) -> None:
    """What cannot be read goes to the dead-letter stream with its kind, reason and source,
    its raw content cut to a bound, and is counted by kind."""
    from simrun.queues.client import DEAD_LETTER_RAW_BYTES, dead_letter_counts, quarantine

    redis, keys = queue.redis, queue.keys
    await quarantine(redis, keys, "report", "bad field 'run'", {b"run": b"\xff" * 9000}, "1-0")
    await quarantine(redis, keys, "heartbeat", "not JSON", b"garbage", keys.worker("w1"))
    entries = await redis.xrange(keys.dead_letters)
    assert [e[1][b"kind"] for e in entries] == [b"report", b"heartbeat"]
    first = entries[0][1]
    assert first[b"reason"] == b"bad field 'run'"
    assert first[b"source"] == b"1-0"
    assert len(first[b"raw"]) <= DEAD_LETTER_RAW_BYTES
    assert b"\\xff" in first[b"raw"]
    assert entries[1][1][b"raw"] == b"garbage"
    assert await dead_letter_counts(redis, keys) == {"report": 1, "heartbeat": 1}
