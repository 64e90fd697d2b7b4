"""The service recovering from what goes wrong in production: a worker killed mid-run, the
controller killed mid-run, Redis losing its data, units that fail and are replayed.

Real parts throughout: a Redis server, the controller, SQLite files and worker containers
as child processes running the svc-work test type (tests/support/service_tasks.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from simrun.core.states import TaskCounts
from simrun.local.redis import PrivateRedis
from simrun.service.controller import Controller
from tests.support.service_harness import (
    RETRY_ONCE,
    TYPES,
    failing_work,
    service,
    settings,
    start_controller,
    start_worker,
    stop_worker,
    submit,
    work_doc,
    workers,
)
from tests.support.units import calls, unit_records
from tests.support.wait import until

pytestmark = pytest.mark.e2e


async def test_killed_worker_units_finish_elsewhere(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """A worker SIGKILLed while it runs units: its units go to the other worker with a new
    attempt, the run succeeds, and the store has every unit done exactly once."""
    store = tmp_path / "store"
    doomed = start_worker(redis_url, redis_prefix, store=store, worker_id="doomed")
    survivor = start_worker(redis_url, redis_prefix, store=store, worker_id="survivor")
    try:
        async with service(store, redis_url, redis_prefix) as svc:
            # Units long enough that the killed worker still holds some when the store,
            # late on a loaded machine, shows it running one.
            run_id = await svc.submit(work_doc(units=24, seconds=1.0))
            rs = svc.controller.store

            async def doomed_is_running() -> bool:
                running = await rs.units(run_id, "work", states=["running"])
                return any(u.worker == "doomed" for u in running)

            await svc.until(doomed_is_running)
            held = {u.index for u in await rs.units(run_id, "work") if u.worker == "doomed"}
            os.killpg(doomed.pid, signal.SIGKILL)
            run = await svc.wait(run_id, timeout_s=90)
            units = [u for u in await rs.units(run_id, "work") if u.kind == "chunk"]
            left = await svc.controller.queue.queued_job_ids("cpu")
    finally:
        stop_worker(doomed)
        stop_worker(survivor)
    assert run.state == "succeeded", run.message
    assert len(units) == 24
    assert {u.state for u in units} == {"done"}
    moved = [u for u in units if u.index in held and u.state == "done" and u.attempt > 1]
    assert moved, "no unit of the killed worker was dispatched again"
    assert all(u.worker == "survivor" for u in moved)
    out = store / "runs" / run_id / "work" / "out"
    assert sorted(unit_records(out)) == list(range(24))
    assert left == [], "the killed worker's jobs were left in arq's queue"


async def test_worker_killed_before_its_heartbeat_named_its_jobs(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """A worker SIGKILLed after arq gave it jobs but before a heartbeat of it listed them:
    arq holds those jobs in progress for days and no worker is seen with them, yet once no
    live worker has listed them for a heartbeat's time to live, their units are dispatched
    again (new attempt) and the old jobs dropped from arq; the run succeeds elsewhere."""
    store = tmp_path / "store"
    # It beats when it starts and then not for a minute: it dies before naming its jobs.
    doomed = start_worker(
        redis_url,
        redis_prefix,
        store=store,
        worker_id="doomed",
        heartbeat_s=60.0,
        heartbeat_ttl_s=120.0,
    )
    survivor = None
    try:
        async with service(store, redis_url, redis_prefix) as svc:
            queue, rs = svc.controller.queue, svc.controller.store

            async def doomed_is_up() -> bool:
                return any(w.id == "doomed" for w in await queue.live_workers())

            await svc.until(doomed_is_up)
            # past the second beat of its start (its heartbeat loop's first): no sign tells it
            # from the first, which doomed_is_up saw
            await asyncio.sleep(0.3)
            run_id = await svc.submit(work_doc(units=4, seconds=0.5))
            taken: set[str] = set()

            async def doomed_took_jobs() -> bool:
                taken.update(await queue.held_in_progress(j.id for j in await rs.jobs(run_id)))
                return bool(taken)

            await svc.until(doomed_took_jobs)
            held = {u.index for u in await rs.units(run_id, "work") if u.job_id in taken}
            os.killpg(doomed.pid, signal.SIGKILL)
            survivor = start_worker(redis_url, redis_prefix, store=store, worker_id="survivor")
            run = await svc.wait(run_id, timeout_s=30)
            units = [u for u in await rs.units(run_id, "work") if u.kind == "chunk"]
            left = await queue.queued_job_ids("cpu")
            still_held = await queue.held_in_progress(taken)
            heartbeat = await queue.redis.get(queue.keys.worker("doomed"))
    finally:
        stop_worker(doomed)
        if survivor is not None:
            stop_worker(survivor)
    assert heartbeat is not None, "the dead worker's heartbeat expired: not the case tested"
    assert run.state == "succeeded", run.message
    assert held, "the doomed worker took no unit"
    assert {u.state for u in units} == {"done"}
    moved = [u for u in units if u.index in held]
    assert all(u.attempt > 1 and u.worker == "survivor" for u in moved), moved
    assert (left, still_held) == ([], set()), "the abandoned jobs were left in arq"


async def test_killed_controller_restarts_and_finishes(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """The controller killed (SIGKILL) mid-run and started again on the same files finishes
    the run, with every unit done."""
    store = tmp_path / "store"
    controller = start_controller(store, redis_url, redis_prefix)
    try:
        with workers(redis_url, redis_prefix, store=store, count=1):
            # a controller object only to submit (its loop does not run); the child works
            submitter = await Controller.open(settings(store, redis_url, redis_prefix), TYPES)
            try:
                run_id = await submit(submitter, work_doc(units=30, seconds=0.15))

                async def five_done() -> bool:
                    counts = await submitter.store.counts(run_id)
                    return counts.get("work", TaskCounts()).done >= 5

                await until(five_done, timeout_s=30, what="the controller process to work")
            finally:
                await submitter.close()
            controller.kill()
            controller.wait(timeout=10)
            async with service(store, redis_url, redis_prefix) as svc:
                run = await svc.wait(run_id, timeout_s=90)
                units = await svc.controller.store.units(run_id, "work")
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert run.state == "succeeded", run.message
    assert [u.index for u in units if u.state == "done" and u.kind == "chunk"] == list(range(30))


async def test_redis_data_loss_is_rebuilt_from_sqlite(
    tmp_path: Path, private_redis: PrivateRedis, redis_prefix: str
) -> None:
    """Redis flushed mid-run (a private server): the controller finds the lost jobs, puts
    them back in the queue, and the run succeeds with every unit done."""
    url = private_redis.url
    store = tmp_path / "store"
    with workers(url, redis_prefix, store=store, count=1, processes=2):
        async with service(store, url, redis_prefix) as svc:
            run_id = await svc.submit(work_doc(units=40, seconds=0.1))

            async def some_done() -> bool:
                counts = await svc.controller.store.counts(run_id)
                return "work" in counts and counts["work"].done >= 6

            await svc.until(some_done)
            client = aioredis.Redis.from_url(url)
            await client.flushall()
            await client.aclose()
            run = await svc.wait(run_id, timeout_s=90)
            units = await svc.controller.store.units(run_id, "work")
    assert run.state == "succeeded", run.message
    assert [u.index for u in units if u.state == "done" and u.kind == "chunk"] == list(range(40))
    assert any(u.attempt > 1 for u in units), "no job was dispatched again after the flush"


async def test_failed_units_replayed_without_recomputing_done_ones(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Units that keep failing fail the run, which lists them with their tracebacks; once
    the cause is gone a replay finishes the run, and units done before are not computed
    again."""
    store = tmp_path / "store"
    flag, doc = failing_work(tmp_path, [2, 4])
    with workers(redis_url, redis_prefix, store=store):
        async with service(store, redis_url, redis_prefix, limits=RETRY_ONCE) as svc:
            run_id = await svc.submit(doc)
            failed = await svc.wait(run_id, timeout_s=60)
            failures = await svc.controller.queries.failures(run_id)
            out = store / "runs" / run_id / "work" / "out"
            assert not (out / "merged.json").exists()
            flag.unlink()
            assert await svc.controller.replay(run_id) == 2
            run = await svc.wait(run_id, timeout_s=60)
    assert (failed.state, failed.message) == ("failed", "2 units failed: work [2, 4]")
    assert [(f.unit, f.errors) for f in failures] == [(2, 2), (4, 2)]
    assert all("fails on purpose" in (f.error or "") for f in failures)
    assert run.state == "succeeded", run.message
    assert calls(out) == {0: 1, 1: 1, 2: 3, 3: 1, 4: 3, 5: 1}
    assert (out / "merged.json").read_text() == "[0, 1, 2, 3, 4, 5]"


async def test_gpu_task_runs_on_the_gpu_worker(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """A task that asks for a GPU is dispatched to the gpu queue and runs on the gpu worker,
    its units seeing the GPU they were granted."""
    store = tmp_path / "store"
    doc = work_doc(units=3).replace('"settings"', '"resources": {"gpus": 1}, "settings"')
    env = {"CUDA_VISIBLE_DEVICES": "GPU-fake-3"}
    with workers(redis_url, redis_prefix, store=store, queue="gpu", gpus=1, env=env):
        async with service(store, redis_url, redis_prefix) as svc:
            run_id = await svc.submit(doc)
            run = await svc.wait(run_id, timeout_s=60)
            view = await svc.controller.queries.run(run_id)
    assert run.state == "succeeded", run.message
    assert view is not None
    assert view.tasks[0].queue == "gpu"
    records = unit_records(store / "runs" / run_id / "work" / "out")
    assert {r["cuda_visible_devices"] for r in records.values()} == {"GPU-fake-3"}
