"""The controller against a real Redis and a real SQLite file, without worker processes:
what it dispatches, when it holds back, and how it rebuilds the queues from SQLite.

The controllers here read a `ManualClock`: a test of a rule over time steps it rather than
sleeping (a heartbeat's expiry in Redis is Redis's own clock: such a test deletes the key).

Worker containers appear here only as what they write to Redis: their heartbeats (with the
worker's own `Heartbeat`) and report entries (`ReportEntry.to_fields`, as a worker adds
them), to pin down the rules; real workers run in tests/e2e/test_service_*.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from arq.constants import in_progress_key_prefix

from simrun.core.clock import ManualClock
from simrun.core.reports import ReportEntry, RunningJob, WorkerReport
from simrun.core.states import Limits
from simrun.local.redis import PrivateRedis
from simrun.plugins import load_types
from simrun.queues.client import current_attempts
from simrun.resources import ResourceKey
from simrun.runstore.rows import RunRow
from simrun.service.controller import Controller, ControllerSettings
from simrun.worker.heartbeat import Heartbeat
from simrun.workflow import WorkflowError, check_workflow, load_workflow, parse_workflow
from tests.support import REPO
from tests.support.heartbeats import worker_info
from tests.support.service_tasks import REFS
from tests.support.wait import until

pytestmark = pytest.mark.redis

HEAT = REPO / "examples" / "heat.yaml"
TYPES = load_types()


@pytest.fixture
async def heat_controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    """A controller of the installed (example) types with a window of 10 jobs, on a fresh
    store; its loop is not running (tests step it). Not the `controller` of conftest.py,
    which has the service's test types and settings. It does not probe (``probe=False``):
    the tests here count the jobs of a whole window of a fresh key's task; probing is
    tests/integration/test_dispatch_probe.py's."""
    settings = ControllerSettings(
        store=tmp_path / "store", redis_url=redis_url, prefix=redis_prefix, window_jobs=10,
        probe=False,
    )  # fmt: skip
    c = await Controller.open(settings, TYPES, clock=ManualClock())
    yield c
    await c.close()


def clock(c: Controller) -> ManualClock:
    """The manual clock of a controller of these fixtures."""
    assert isinstance(c.clock, ManualClock)
    return c.clock


async def submit_heat(c: Controller, text: str | None = None) -> str:
    text = text or HEAT.read_text()
    doc = parse_workflow(text)
    return await c.submit(doc, check_workflow(doc, TYPES), text, base=HEAT.parent)


async def beat(
    c: Controller, worker_id: str, memory_gb: float, queues=("cpu",), processes=2, **more
):
    now = time.time()
    info = worker_info(
        worker_id, queues=tuple(queues), memory_gb=memory_gb, processes=processes,
        started=now, updated=now, **more,
    )  # fmt: skip
    await Heartbeat(c.queue.redis, c.queue.keys, lambda: info, interval_s=1, ttl_s=30).beat()


async def test_dispatch_one_unit_per_job_within_the_window(heat_controller: Controller):
    """With nothing learned, each job carries one unit; at most window_jobs are in Redis,
    the rest stay pending; a unit dispatched for the first time gets no attempt in Redis
    (none recorded counts as current: Redis holds only units dispatched again)."""
    run_id = await submit_heat(heat_controller)
    assert await heat_controller.step()
    queued = await heat_controller.queue.queued_job_ids("cpu")
    assert len(queued) == 10
    assert all(q.startswith(f"{run_id}:sweep:") and q.endswith(":1") for q in queued)
    view = await heat_controller.queries.run(run_id)
    assert view is not None
    sweep = view.tasks[0]
    assert (sweep.state, sweep.units, sweep.counts["queued"], sweep.counts["pending"]) == (
        "running", 24, 10, 14,
    )  # fmt: skip
    assert sweep.resources is not None
    assert sweep.resources["memory_per_worker_gb"] == 1.0  # the heat type's hint
    attempts = await current_attempts(
        heat_controller.queue.redis, heat_controller.queue.keys, run_id, "sweep", list(range(24))
    )
    assert attempts == {}
    assert await attempts_keys(heat_controller, run_id) == []
    await heat_controller.step()  # the window is full: nothing more goes out
    assert len(await heat_controller.queue.queued_job_ids("cpu")) == 10
    # the copy of the source is in the run's directory
    copy = heat_controller.settings.store / "runs" / run_id / "sources" / "plate" / "plate.json"
    assert copy.read_bytes() == (REPO / "examples" / "plate.json").read_bytes()


async def test_request_no_worker_fits_blocks_the_task(heat_controller: Controller):
    """A request larger than every live worker of its queue blocks the task with a status
    naming both; a big enough worker appearing lifts it and the units go out."""
    text = HEAT.read_text().replace(
        "    inputs:\n      plate:",
        "    resources: {memory_per_worker_gb: 40}\n    inputs:\n      plate:",
    )
    await beat(heat_controller, "small", 16.0)
    run_id = await submit_heat(heat_controller, text)
    await heat_controller.step()
    view = await heat_controller.queries.run(run_id)
    assert view is not None
    assert (view.tasks[0].state, view.tasks[0].status) == (
        "blocked",
        "needs 40 GiB per process; the largest cpu worker has 16 GiB",
    )
    assert await heat_controller.queue.queued_job_ids("cpu") == []
    await beat(heat_controller, "big", 64.0)
    await heat_controller.step()
    view = await heat_controller.queries.run(run_id)
    assert view is not None
    assert (view.tasks[0].state, view.tasks[0].status) == ("running", "")
    assert len(await heat_controller.queue.queued_job_ids("cpu")) == 10


async def test_scratch_no_worker_has_blocks_the_task(heat_controller: Controller):
    """A task asking for more local scratch than every live worker of its queue has room
    for is blocked with a status naming both (as for memory); a worker with the room
    appearing lifts it and the units go out."""
    text = HEAT.read_text().replace(
        "    inputs:\n      plate:",
        "    resources: {scratch_gb: 50}\n    inputs:\n      plate:",
    )
    await beat(heat_controller, "small", 16.0, free_scratch_gb=10.0)
    run_id = await submit_heat(heat_controller, text)
    await heat_controller.step()
    view = await heat_controller.queries.run(run_id)
    assert view is not None
    assert (view.tasks[0].state, view.tasks[0].status) == (
        "blocked",
        "needs 50 GiB of local scratch; the cpu worker with the most has 10 GiB free",
    )
    assert await heat_controller.queue.queued_job_ids("cpu") == []
    await beat(heat_controller, "roomy", 16.0, free_scratch_gb=200.0)
    await heat_controller.step()
    view = await heat_controller.queries.run(run_id)
    assert view is not None
    assert (view.tasks[0].state, view.tasks[0].status) == ("running", "")
    queued = await heat_controller.queue.queued_job_ids("cpu")
    assert len(queued) == 10


async def test_jobs_lost_from_redis_are_dispatched_again(heat_controller: Controller):
    """Jobs in flight that Redis no longer holds (its data lost) are found on reconcile and
    go out again with a newer attempt; nothing is dispatched twice."""
    run_id = await submit_heat(heat_controller)
    await heat_controller.step()
    redis, keys = heat_controller.queue.redis, heat_controller.queue.keys
    lost = await heat_controller.queue.queued_job_ids("cpu")
    await redis.delete(keys.queue("cpu"), *[f"arq:job:{keys.arq_job_id(j)}" for j in lost])
    clock(heat_controller).advance(heat_controller.settings.reconcile_s)  # reconciling is due again
    await heat_controller.step()
    again = await heat_controller.queue.queued_job_ids("cpu")
    assert len(again) == 10
    assert sorted(j.rsplit(":", 1)[0] for j in again) == sorted(j.rsplit(":", 1)[0] for j in lost)
    assert {j.rsplit(":", 1)[1] for j in again} == {"2"}
    units = await heat_controller.store.units(run_id, "sweep", states=["queued"])
    assert len(units) == 10
    assert {u.attempt for u in units} == {2}


async def test_stale_and_repeated_reports_change_nothing(heat_controller: Controller):
    """A report of an older attempt (other than done) and a report read again leave the
    units as they are; a done report counts once and lets the rest of the units out."""
    run_id = await submit_heat(heat_controller)
    await heat_controller.step()
    redis, keys = heat_controller.queue.redis, heat_controller.queue.keys
    (first,) = [j for j in await heat_controller.queue.queued_job_ids("cpu") if ":sweep:0:" in j]

    def report(attempt: int, outcome: str) -> dict[str, str]:
        return ReportEntry(
            job_id=f"{run_id}:sweep:0:{attempt}", run=run_id, task="sweep", kind="chunk",
            attempt=attempt, worker_id="w", outcomes={0: outcome},  # type: ignore[dict-item]
            report=WorkerReport(
                peak_memory_gb=(0.2,), seconds_per_unit=0.05, units=1, limit_gb=1.0
            ), started=1.0, finished=2.0,
        ).to_fields(heat_controller.queue.key)  # fmt: skip

    await redis.xadd(keys.reports, report(7, "failed"))  # type: ignore[arg-type]
    await heat_controller.step()
    (unit0,) = [u for u in await heat_controller.store.units(run_id, "sweep") if u.index == 0]
    assert (unit0.state, unit0.errors) == ("queued", 0)
    await redis.xadd(keys.reports, report(1, "done"))  # type: ignore[arg-type]
    await redis.xadd(keys.reports, report(1, "failed"))  # type: ignore[arg-type]
    await heat_controller.step()
    (unit0,) = [u for u in await heat_controller.store.units(run_id, "sweep") if u.index == 0]
    assert (unit0.state, unit0.errors) == ("done", 0)
    history = await heat_controller.resources.history(ResourceKey("heat", "plate", "64"))
    assert len(history) == 1  # the job was measured once
    assert first.endswith(":1")
    # recorded with the size of the task's input (the plate, its one source)
    assert history[0].input_bytes == (HEAT.parent / "plate.json").stat().st_size


async def test_cancel_marks_units_stale(heat_controller: Controller):
    """Cancelling a run ends it, dispatches nothing more, and raises the current attempt of
    its queued units so that workers skip them."""
    run_id = await submit_heat(heat_controller)
    await heat_controller.step()
    assert await heat_controller.cancel(run_id) == 10
    run = await heat_controller.store.run(run_id)
    assert run is not None
    assert run.state == "cancelled"
    attempts = await current_attempts(
        heat_controller.queue.redis, heat_controller.queue.keys, run_id, "sweep", list(range(24))
    )
    assert attempts == dict.fromkeys(range(10), 2)
    await heat_controller.step()
    assert await heat_controller.store.jobs() == []


def _running(job_id: str) -> RunningJob:
    """The heartbeat record of the running chunk job ``job_id`` (run:task:index:attempt)."""
    run, task, index, attempt = job_id.split(":")
    return RunningJob(
        job_id=job_id, run=run, task=task, kind="chunk", indices=(int(index),),
        attempt=int(attempt), state="running",
    )  # fmt: skip


async def attempts_keys(c: Controller, run_id: str) -> list[str]:
    """The attempts hashes of a run in Redis, found by a SCAN of the test's prefix."""
    keys = c.queue.keys
    found = [k.decode() async for k in c.queue.redis.scan_iter(match=keys.attempts_pattern)]
    return sorted(k for k in found if keys.split_attempts(k)[0] == run_id)


async def test_attempts_of_a_cancelled_run_stay_until_its_jobs_are_gone(
    heat_controller: Controller,
):
    """A cancelled run's attempts hash stays while a job of it waits in a queue or a live
    worker lists one (workers need the raised attempts to skip them), and is deleted once
    no job of it is left in Redis."""
    c = heat_controller
    run_id = await submit_heat(c)
    await c.step()
    await c.cancel(run_id)
    await c.step()
    assert await c.forget_ended() == 0
    assert await attempts_keys(c, run_id) == [c.queue.keys.attempts(run_id, "sweep")]
    queued = await c.queue.queued_job_ids("cpu")
    assert len(queued) == 10
    # A worker took the last job: out of the queue for this test, listed by its heartbeat.
    await c.queue.drop_jobs("cpu", queued)
    running = (_running(queued[-1]),)
    now = time.time()
    info = worker_info(
        "w1", memory_gb=4.0, free_processes=1, running=running, started=now, updated=now
    )
    await Heartbeat(c.queue.redis, c.queue.keys, lambda: info, interval_s=1, ttl_s=30).beat()
    assert await c.forget_ended() == 0
    assert await attempts_keys(c, run_id) == [c.queue.keys.attempts(run_id, "sweep")]
    await c.queue.redis.delete(c.queue.keys.worker("w1"))  # the worker is done with it
    assert await c.forget_ended() == 1
    assert await attempts_keys(c, run_id) == []


async def test_attempts_left_by_an_earlier_service_are_found_at_start(
    tmp_path: Path, redis_url: str, redis_prefix: str
):
    """A service that starts finds the attempts hashes an earlier one left behind (a SCAN
    of its prefix): those of a run that ended, and of a run its store does not know, go
    once no job of them is left; those of a running run stay."""
    settings = ControllerSettings(
        store=tmp_path / "store", redis_url=redis_url, prefix=redis_prefix, window_jobs=10,
        probe=False,
    )  # fmt: skip
    unknown = "20200101-000000-abcdef"
    first = await Controller.open(settings, TYPES)
    try:
        ended = await submit_heat(first)
        await first.step()
        await first.cancel(ended)
        running = await submit_heat(first)
        await first.step()  # the window is free again: the other run's units go out
        # A unit of the running run dispatched again: its attempt is recorded.
        await first.queue.redis.hset(first.queue.keys.attempts(running, "sweep"), "0", "2")
        stale = [j for j in await first.queue.queued_job_ids("cpu") if j.startswith(ended)]
        assert len(stale) == 10
        await first.queue.drop_jobs("cpu", stale)  # the workers skipped them
        await first.queue.redis.hset(first.queue.keys.attempts(unknown, "t"), "0", "1")
    finally:
        await first.close()  # before it looked again: the hashes are left behind
    assert len(await attempts_keys(first, ended)) == 1
    second = await Controller.open(settings, TYPES)
    try:
        await second.step()
        assert await attempts_keys(second, ended) == []
        assert await attempts_keys(second, unknown) == []
        assert await attempts_keys(second, running) == [
            second.queue.keys.attempts(running, "sweep")
        ]
    finally:
        await second.close()


async def test_gpu_task_goes_to_the_gpu_queue(heat_controller: Controller):
    """A task that needs a GPU is dispatched to the gpu queue, not the cpu one."""
    text = HEAT.read_text().replace(
        "    inputs:\n      plate:", "    resources: {gpus: 1}\n    inputs:\n      plate:"
    )
    run_id = await submit_heat(heat_controller, text)
    await heat_controller.step()
    assert len(await heat_controller.queue.queued_job_ids("gpu")) == 10
    assert await heat_controller.queue.queued_job_ids("cpu") == []
    view = await heat_controller.queries.run(run_id)
    assert view is not None
    assert view.tasks[0].queue == "gpu"


async def test_submit_with_a_missing_source_creates_nothing(
    heat_controller: Controller, tmp_path: Path
):
    """A document whose source is missing is refused naming it, and no run or directory is
    left behind."""
    doc = load_workflow(HEAT)
    with pytest.raises(WorkflowError, match=r"sources\.plate: file not found"):
        await heat_controller.submit(doc, check_workflow(doc, TYPES), "", base=tmp_path)
    assert await heat_controller.queries.runs() == []
    assert not (heat_controller.settings.store / "runs").exists()


WORK_TYPES = load_types(REFS)


@pytest.fixture
async def work_controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    settings = ControllerSettings(
        store=tmp_path / "store",
        redis_url=redis_url,
        prefix=redis_prefix,
        limits=Limits(max_retries=0, max_kills=1),
    )
    c = await Controller.open(settings, WORK_TYPES, clock=ManualClock())
    yield c
    await c.close()


async def submit_work(c: Controller, **settings: object) -> str:
    text = json.dumps({"tasks": [{"name": "work", "type": "svc-work", "settings": settings}]})
    doc = parse_workflow(text)
    return await c.submit(doc, check_workflow(doc, c.types), text)


async def report(c: Controller, run_id: str, index: int, attempt: int, outcome: str) -> None:
    """What a worker writes for a one-unit job (the input of the ingest step)."""
    fields = ReportEntry(
        job_id=f"{run_id}:work:{index}:{attempt}", run=run_id, task="work", kind="chunk",
        attempt=attempt, worker_id="w", outcomes={index: outcome},  # type: ignore[dict-item]
        errors={index: "Traceback: boom"} if outcome == "failed" else {},
        report=WorkerReport(
            peak_memory_gb=(0.1,), seconds_per_unit=0.01, units=1, limit_gb=0.25
        ), started=1.0, finished=2.0,
    ).to_fields(c.queue.key)  # fmt: skip
    await c.queue.redis.xadd(c.queue.keys.reports, fields)  # type: ignore[arg-type]


async def fail_two_units(c: Controller) -> tuple[str, RunRow]:
    """A run of two units whose first attempts both failed, once the controller took in
    their reports: its id and its row."""
    run_id = await submit_work(c, units=2)
    await c.step()
    for index in (0, 1):
        await report(c, run_id, index, 1, "failed")
    await c.step()
    run = await c.store.run(run_id)
    assert run is not None
    return run_id, run


async def test_count_units_failure_fails_task_and_run(work_controller: Controller):
    """A count_units that raises fails its task with the error as status, and the run with
    a message naming the task."""
    run_id = await submit_work(work_controller, units=-1)
    await work_controller.step()
    run = await work_controller.store.run(run_id)
    assert run is not None
    assert run.state == "failed"
    assert "work: count_units of type 'svc-work' returned -1, a negative count" in run.message
    (task,) = await work_controller.store.tasks(run_id)
    assert task.state == "failed"


async def test_failed_units_fail_the_run_and_replay_with_memory(work_controller: Controller):
    """Units failing past the retry limit fail their task and the run, which lists them; a
    replay with a memory override dispatches them again with that memory and a new attempt."""
    run_id, run = await fail_two_units(work_controller)
    assert (run.state, run.message) == ("failed", "2 units failed: work [0-1]")
    failures = await work_controller.queries.failures(run_id)
    assert [(f.unit, f.error) for f in failures] == [(0, "Traceback: boom"), (1, "Traceback: boom")]
    assert await work_controller.replay(run_id, memory_gb=3.0) == 2
    await work_controller.step()
    units = await work_controller.store.units(run_id, "work")
    assert {(u.state, u.attempt, u.memory_gb) for u in units} == {("queued", 2, 3.0)}
    run = await work_controller.store.run(run_id)
    assert run is not None
    assert run.state == "running"


async def test_attempts_of_a_failed_run_go_and_a_replay_writes_them_again(
    work_controller: Controller,
):
    """A failed run whose units were dispatched once has no attempts hash (nothing to
    forget), and a replay dispatches the failed units with a newer attempt, written before
    their jobs are enqueued; the hash stays while the run runs again."""
    c = work_controller
    run_id, run = await fail_two_units(c)
    assert run.state == "failed"
    assert await attempts_keys(c, run_id) == []
    await c.queue.drop_jobs("cpu", await c.queue.queued_job_ids("cpu"))
    assert await c.forget_ended() == 0
    assert await c.replay(run_id) == 2
    await c.step()
    units = await c.store.units(run_id, "work")
    assert {(u.state, u.attempt) for u in units} == {("queued", 2)}
    queued = await c.queue.queued_job_ids("cpu")
    assert queued
    assert all(j.startswith(f"{run_id}:work:") and j.endswith(":2") for j in queued)
    assert await current_attempts(c.queue.redis, c.queue.keys, run_id, "work", [0, 1]) == {
        0: 2,
        1: 2,
    }
    assert await c.forget_ended() == 0  # running again: the hash stays


async def test_all_units_done_merge_then_done(work_controller: Controller):
    """When every unit is done the merge job goes out; the merge done ends the task and
    the run succeeds."""
    run_id = await submit_work(work_controller, units=2)
    await work_controller.step()
    for index in (0, 1):
        await report(work_controller, run_id, index, 1, "done")
    await work_controller.step()
    queued = await work_controller.queue.queued_job_ids("cpu")
    assert f"{run_id}:work:merge:1" in queued
    (task,) = await work_controller.store.tasks(run_id)
    assert task.state == "merging"
    fields = ReportEntry(
        job_id=f"{run_id}:work:merge:1", run=run_id, task="work", kind="merge", attempt=1,
        worker_id="w", outcomes={"merge": "done"}, report=WorkerReport(
            peak_memory_gb=(0.1,), seconds_per_unit=None, units=0, limit_gb=0.25
        ),
        started=1.0, finished=2.0,
    ).to_fields(work_controller.queue.key)  # fmt: skip
    await work_controller.queue.redis.xadd(work_controller.queue.keys.reports, fields)  # type: ignore[arg-type]
    await work_controller.step()
    run = await work_controller.store.run(run_id)
    assert run is not None
    assert run.state == "succeeded"


async def test_units_of_a_worker_whose_heartbeat_expired_go_again(work_controller: Controller):
    """Units a worker said it runs are dispatched again with a new attempt as soon as its
    heartbeat expires, without waiting for arq."""
    run_id = await submit_work(work_controller, units=1)
    await work_controller.step()
    running = (_running(f"{run_id}:work:0:1"),)
    now = time.time()
    info = worker_info(
        "w9", memory_gb=4.0, free_processes=1, running=running, started=now, updated=now
    )
    c = work_controller
    await Heartbeat(c.queue.redis, c.queue.keys, lambda: info, interval_s=1, ttl_s=30).beat()
    await c.step()
    (unit,) = await c.store.units(run_id, "work")
    assert (unit.state, unit.worker, unit.attempt) == ("running", "w9", 1)
    await c.queue.redis.delete(c.queue.keys.worker("w9"))  # its heartbeat expired
    await c.step()
    (unit,) = await c.store.units(run_id, "work")
    assert (unit.state, unit.attempt, unit.worker) == ("queued", 2, None)
    assert f"{run_id}:work:0:2" in await c.queue.queued_job_ids("cpu")


async def test_jobs_a_dead_worker_took_unlisted_go_again_after_a_heartbeat_ttl(
    work_controller: Controller,
):
    """A job arq holds in progress (a worker took it) that no live worker lists is dispatched
    again (new attempt, dropped from arq) once it stayed unlisted for longer than a heartbeat
    lives, and not before: its worker died before a heartbeat named it."""

    c = work_controller
    run_id = await submit_work(c, units=1)
    await c.step()
    (job,) = await c.queue.queued_job_ids("cpu")
    held = in_progress_key_prefix + c.queue.keys.arq_job_id(job)
    await c.queue.redis.set(held, b"1")  # arq's mark of a job a worker took
    await c.step()  # seen held and unlisted: the time starts
    clock(c).advance(c.settings.heartbeat_ttl_s / 2)
    await c.step()
    (unit,) = await c.store.units(run_id, "work")
    assert (unit.state, unit.attempt) == ("queued", 1), "given up before a heartbeat's TTL"
    clock(c).advance(c.settings.heartbeat_ttl_s / 2 + 0.01)
    await c.step()
    (unit,) = await c.store.units(run_id, "work")
    assert (unit.state, unit.attempt) == ("queued", 2)
    assert await c.queue.queued_job_ids("cpu") == [f"{run_id}:work:0:2"]
    assert await c.queue.held_in_progress([job]) == set(), "the abandoned job was left in arq"


async def test_a_cancel_while_redis_is_away_is_kept_and_told_to_workers_later(
    tmp_path: Path, redis_prefix: str
) -> None:
    """A cancel while Redis is away still cancels the run (SQLite is the truth) instead of
    failing; the raised attempts of its queued units, which Redis could not take then, are
    written at the first step after Redis is back, so workers skip those units."""
    server = PrivateRedis(persist=True)  # back with its data: the queued jobs are still there
    server.start()
    settings = ControllerSettings(
        store=tmp_path / "store", redis_url=server.url, prefix=redis_prefix, window_jobs=10,
        probe=False,
    )  # fmt: skip
    c = await Controller.open(settings, TYPES, clock=ManualClock())
    try:
        run_id = await submit_heat(c)
        await c.step()
        server.kill()
        assert await c.cancel(run_id) == 10
        run = await c.store.run(run_id)
        assert run is not None
        assert run.state == "cancelled"
        server.start()
        await c.step()
        attempts = await current_attempts(c.queue.redis, c.queue.keys, run_id, "sweep", range(24))
        assert attempts == dict.fromkeys(range(10), 2)
    finally:
        await c.close()
        server.stop()


async def test_the_idle_loop_wakes_for_a_command_and_for_a_report(
    tmp_path: Path, redis_url: str, redis_prefix: str
):
    """The loop, idle between steps for ``poll_s`` (here 30 s), steps at once when a run is
    submitted and when a worker adds a report to the stream: the run's job goes out, and
    its unit is done, long before a poll would have come."""
    settings = ControllerSettings(
        store=tmp_path / "store", redis_url=redis_url, prefix=redis_prefix, poll_s=30.0,
        limits=Limits(max_retries=0, max_kills=1),
    )  # fmt: skip
    c = await Controller.open(settings, WORK_TYPES)
    stop = asyncio.Event()
    loop = asyncio.ensure_future(c.run_forever(stop))
    try:
        # the loop is idle now: it shows no sign of it, and a sleep too short under load
        # only lets its first step find the run (the test proves less, never fails)
        await asyncio.sleep(0.2)
        run_id = await submit_work(c, units=1)

        async def queued() -> bool:
            return bool(await c.queue.queued_job_ids("cpu"))

        woken = "a wake (within 5 s of the 30 s poll) for"
        await until(queued, timeout_s=5, what=f"{woken} the job of the run submitted")
        await report(c, run_id, 0, 1, "done")

        async def done() -> bool:
            counts = await c.store.counts(run_id)
            return "work" in counts and counts["work"].done == 1

        await until(done, timeout_s=5, what=f"{woken} the unit of the report")
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
        await c.close()


async def test_unreadable_reports_are_moved_aside_and_never_stop_a_step(
    work_controller: Controller,
) -> None:
    """Report entries that are unsigned, signed with another key, not UTF-8 or a forged
    stub, even when delivered before a restart and not acknowledged, are moved to the
    dead-letter stream with their reason and acknowledged; the good report among them is
    applied in the same step and the stream is left empty."""
    from simrun.core.signing import JobKey
    from simrun.queues.client import dead_letter_counts

    c = work_controller
    redis, keys = c.queue.redis, c.queue.keys
    run_id = await submit_work(c, units=1)
    await c.step()  # dispatches unit 0 (and makes the service's consumer group)
    good = ReportEntry(
        job_id=f"{run_id}:work:0:1", run=run_id, task="work", kind="chunk", attempt=1,
        worker_id="w", outcomes={0: "done"}, report=WorkerReport(
            peak_memory_gb=(0.1,), seconds_per_unit=0.01, units=1, limit_gb=0.25
        ), started=1.0, finished=2.0,
    )  # fmt: skip
    other = JobKey.parse(b"o" * 40, "another service")
    poison: list[dict[Any, Any]] = [
        {k: v for k, v in good.to_fields(c.queue.key).items() if k != "sig"},  # unsigned
        good.to_fields(other),
        {b"job_id": b"\xff\xfe", b"run": b"\xc3("},  # not UTF-8
        {"v": "1", "sig": "00"},
    ]
    ids = [await redis.xadd(keys.reports, fields) for fields in poison]
    await redis.xadd(keys.reports, good.to_fields(c.queue.key))  # type: ignore[arg-type]
    # a service that read them and died before acknowledging: they are pending
    await redis.xreadgroup(c.settings.group, c.settings.consumer, {keys.reports: ">"})
    c._ingest.redis_back()  # what a restart does: read the pending entries first

    await c.step()
    await c.step()

    (unit,) = [u for u in await c.store.units(run_id, "work") if u.index == 0]
    assert unit.state == "done"
    letters = await redis.xrange(keys.dead_letters)
    assert [f[b"source"] for _, f in letters] == ids
    reasons = [f[b"reason"].decode() for _, f in letters]
    assert "unsigned" in reasons[0]
    assert "another key" in reasons[1]
    assert "not UTF-8" in reasons[2]
    assert await dead_letter_counts(redis, keys) == {"report": 4}
    assert await redis.xlen(keys.reports) == 0
