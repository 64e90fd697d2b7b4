"""The controller against a real Redis and a real SQLite file, without worker processes:
what it dispatches, when it holds back, and how it rebuilds the queues from SQLite.

Worker containers appear here only as their heartbeats (written with the worker's own
`Heartbeat`); what workers do with jobs is covered by tests/e2e/test_service_*.py.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from simrun.queues import ReportEntry, WorkerInfo, current_attempts
from simrun.resources import ResourceKey
from simrun.service.controller import Controller, ControllerSettings, load_types
from simrun.worker.heartbeat import Heartbeat
from simrun.worker.report import WorkerReport
from simrun.workflow import WorkflowError, check_workflow, load_workflow, parse_workflow

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]
HEAT = REPO / "examples" / "heat.yaml"
TYPES = load_types()


@pytest.fixture
async def controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    settings = ControllerSettings(
        store=tmp_path / "store", redis_url=redis_url, prefix=redis_prefix, window_jobs=10
    )
    c = await Controller.open(settings, TYPES)
    yield c
    await c.close()


async def submit_heat(c: Controller, text: str | None = None) -> str:
    text = text or HEAT.read_text()
    doc = parse_workflow(text)
    return await c.submit(doc, check_workflow(doc, TYPES), text, base=HEAT.parent)


async def beat(c: Controller, worker_id: str, memory_gb: float, queues=("cpu",), processes=2):
    info = WorkerInfo(
        id=worker_id, queues=tuple(queues), memory_gb=memory_gb, processes=processes, gpus=0,
        free_memory_gb=memory_gb, free_processes=processes, running=(), host="h", pid=1,
        started=time.time(), updated=time.time(),
    )  # fmt: skip
    await Heartbeat(c.queue.redis, c.queue.keys, lambda: info, interval_s=1, ttl_s=30).beat()


async def test_dispatch_one_unit_per_job_within_the_window(controller: Controller):
    """With nothing learned, each job carries one unit; at most window_jobs are in Redis,
    the rest stay pending; each unit's current attempt is written before its job."""
    run_id = await submit_heat(controller)
    assert await controller.step()
    queued = await controller.queue.queued_job_ids("cpu")
    assert len(queued) == 10
    assert all(q.startswith(f"{run_id}:sweep:") and q.endswith(":1") for q in queued)
    view = await controller.run(run_id)
    assert view is not None
    sweep = view.tasks[0]
    assert (sweep.state, sweep.units, sweep.counts["queued"], sweep.counts["pending"]) == (
        "running", 24, 10, 14,
    )  # fmt: skip
    assert sweep.resources is not None
    assert sweep.resources["memory_per_worker_gb"] == 1.0  # the heat type's hint
    attempts = await current_attempts(
        controller.queue.redis, controller.queue.keys, run_id, "sweep", list(range(24))
    )
    assert attempts == dict.fromkeys(range(10), 1)
    await controller.step()  # the window is full: nothing more goes out
    assert len(await controller.queue.queued_job_ids("cpu")) == 10
    # the copy of the source is in the run's directory
    copy = controller.settings.store / "runs" / run_id / "sources" / "plate" / "plate.json"
    assert copy.read_bytes() == (REPO / "examples" / "plate.json").read_bytes()


async def test_request_no_worker_fits_blocks_the_task(controller: Controller):
    """A request larger than every live worker of its queue blocks the task with a status
    naming both; a big enough worker appearing lifts it and the units go out."""
    text = HEAT.read_text().replace(
        "    inputs:\n      plate:",
        "    resources: {memory_per_worker_gb: 40}\n    inputs:\n      plate:",
    )
    await beat(controller, "small", 16.0)
    run_id = await submit_heat(controller, text)
    await controller.step()
    view = await controller.run(run_id)
    assert view is not None
    assert (view.tasks[0].state, view.tasks[0].status) == (
        "blocked",
        "needs 40 GiB per process; the largest cpu worker has 16 GiB",
    )
    assert await controller.queue.queued_job_ids("cpu") == []
    await beat(controller, "big", 64.0)
    await controller.step()
    view = await controller.run(run_id)
    assert view is not None
    assert (view.tasks[0].state, view.tasks[0].status) == ("running", "")
    assert len(await controller.queue.queued_job_ids("cpu")) == 10


async def test_jobs_lost_from_redis_are_dispatched_again(controller: Controller):
    """Jobs in flight that Redis no longer holds (its data lost) are found on reconcile and
    go out again with a newer attempt; nothing is dispatched twice."""
    run_id = await submit_heat(controller)
    await controller.step()
    redis, keys = controller.queue.redis, controller.queue.keys
    lost = await controller.queue.queued_job_ids("cpu")
    await redis.delete(keys.queue("cpu"), *[f"arq:job:{keys.arq_job_id(j)}" for j in lost])
    controller._last_reconcile = -float("inf")  # reconcile now, not in reconcile_s
    await controller.step()
    again = await controller.queue.queued_job_ids("cpu")
    assert len(again) == 10
    assert sorted(j.rsplit(":", 1)[0] for j in again) == sorted(j.rsplit(":", 1)[0] for j in lost)
    assert {j.rsplit(":", 1)[1] for j in again} == {"2"}
    units = await controller.store.units(run_id, "sweep", states=["queued"])
    assert len(units) == 10
    assert {u.attempt for u in units} == {2}


async def test_stale_and_repeated_reports_change_nothing(controller: Controller):
    """A report of an older attempt (other than done) and a report read again leave the
    units as they are; a done report counts once and lets the rest of the units out."""
    run_id = await submit_heat(controller)
    await controller.step()
    redis, keys = controller.queue.redis, controller.queue.keys
    (first,) = [j for j in await controller.queue.queued_job_ids("cpu") if ":sweep:0:" in j]

    def report(attempt: int, outcome: str) -> dict[str, str]:
        return ReportEntry(
            job_id=f"{run_id}:sweep:0:{attempt}", run=run_id, task="sweep", kind="chunk",
            attempt=attempt, worker_id="w", outcomes={0: outcome},  # type: ignore[dict-item]
            report=WorkerReport((0.2,), 0.05, 1, 1.0), started=1.0, finished=2.0,
        ).to_fields()  # fmt: skip

    await redis.xadd(keys.reports, report(7, "failed"))  # type: ignore[arg-type]
    await controller.step()
    (unit0,) = [u for u in await controller.store.units(run_id, "sweep") if u.index == 0]
    assert (unit0.state, unit0.errors) == ("queued", 0)
    await redis.xadd(keys.reports, report(1, "done"))  # type: ignore[arg-type]
    await redis.xadd(keys.reports, report(1, "failed"))  # type: ignore[arg-type]
    await controller.step()
    (unit0,) = [u for u in await controller.store.units(run_id, "sweep") if u.index == 0]
    assert (unit0.state, unit0.errors) == ("done", 0)
    history = await controller.resources.history(ResourceKey("heat", "plate", "64"))
    assert len(history) == 1  # the job was measured once
    assert first.endswith(":1")


async def test_cancel_marks_units_stale(controller: Controller):
    """Cancelling a run ends it, dispatches nothing more, and raises the current attempt of
    its queued units so that workers skip them."""
    run_id = await submit_heat(controller)
    await controller.step()
    assert await controller.cancel(run_id) == 10
    run = await controller.store.run(run_id)
    assert run is not None
    assert run.state == "cancelled"
    attempts = await current_attempts(
        controller.queue.redis, controller.queue.keys, run_id, "sweep", list(range(24))
    )
    assert attempts == dict.fromkeys(range(10), 2)
    await controller.step()
    assert await controller.store.jobs() == []


async def test_gpu_task_goes_to_the_gpu_queue(controller: Controller):
    """A task that needs a GPU is dispatched to the gpu queue, not the cpu one."""
    text = HEAT.read_text().replace(
        "    inputs:\n      plate:", "    resources: {gpus: 1}\n    inputs:\n      plate:"
    )
    run_id = await submit_heat(controller, text)
    await controller.step()
    assert len(await controller.queue.queued_job_ids("gpu")) == 10
    assert await controller.queue.queued_job_ids("cpu") == []
    view = await controller.run(run_id)
    assert view is not None
    assert view.tasks[0].queue == "gpu"


async def test_submit_with_a_missing_source_creates_nothing(controller: Controller, tmp_path: Path):
    """A document whose source is missing is refused naming it, and no run or directory is
    left behind."""
    doc = load_workflow(HEAT)
    with pytest.raises(WorkflowError, match=r"sources\.plate: file not found"):
        await controller.submit(doc, check_workflow(doc, TYPES), "", base=tmp_path)
    assert await controller.runs() == []
    assert not (controller.settings.store / "runs").exists()
