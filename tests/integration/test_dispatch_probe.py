"""Probing first: a task of a key with no history sends a probe of one unit per worker
process ahead of its other units, which wait for the probe's report and then go out with
the learned request (`simrun.core.sizing.probe_units`, `simrun.service.dispatch`).

A real controller (real Redis, real SQLite) stepped by the test, and a real worker
container in burst mode in this process (real worker processes): it runs what is queued
and ends, so each test knows exactly what was dispatched before and after a report. The
controller sees a worker of 2 processes through a heartbeat of its own (`beat`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from simrun.cli.progress import plain_lines
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.views import TaskView
from simrun.local import lock as store_lock
from simrun.resources import RETRY_FACTOR, ResourceKey
from simrun.runstore.rows import JobRow
from simrun.service.controller import Controller
from simrun.worker.capacity import Capacity
from simrun.worker.container import WorkerContainer
from simrun.worker.heartbeat import Heartbeat
from simrun.worker.settings import Machine, WorkerSettings
from tests.support import REPO
from tests.support.cli_harness import simrun
from tests.support.heartbeats import worker_info
from tests.support.service_harness import TYPES, settings, submit
from tests.support.service_tasks import REFS, ROOMY, WORK
from tests.support.units import calls

pytestmark = pytest.mark.redis

PROCESSES = 2


@pytest.fixture
async def controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    """A controller that probes (the default) on a fresh store, stepped by the test, which
    sees one live worker of `PROCESSES` processes."""
    c = await Controller.open(settings(tmp_path / "store", redis_url, redis_prefix), TYPES)
    try:
        await beat(c)
        yield c
    finally:
        await c.close()


async def beat(c: Controller) -> None:
    """A heartbeat of a worker of `PROCESSES` processes (it lives 30 s)."""
    now = time.time()
    info = worker_info("seen", memory_gb=4.0, processes=PROCESSES, started=now, updated=now)
    await Heartbeat(c.queue.redis, c.queue.keys, lambda: info, interval_s=1, ttl_s=30).beat()


async def burst(c: Controller) -> None:
    """A real worker container of `PROCESSES` processes runs every job queued, then ends."""
    settings = WorkerSettings(
        redis_url=c.settings.redis_url, prefix=c.settings.prefix, plugins=REFS,
        python_path=(str(REPO),), burst=True, poll_delay_s=0.01, store=c.settings.store,
    )  # fmt: skip
    machine = Machine(Capacity(memory_gb=4.0, processes=PROCESSES))
    await asyncio.wait_for(WorkerContainer(settings, machine, c.queue.key).run(), 60)


async def steps(c: Controller, n: int = 3) -> None:
    for _ in range(n):
        await c.step()


def doc(task_type: str, units: int, **more: object) -> str:
    settings = {"units": units, **more}
    return json.dumps({"tasks": [{"name": "work", "type": task_type, "settings": settings}]})


async def jobs(c: Controller, run_id: str) -> list[JobRow]:
    return await c.store.jobs(run_id)


async def task_view(c: Controller, run_id: str) -> TaskView:
    view = await c.queries.run(run_id)
    assert view is not None
    return view.tasks[0]


async def learned_request(c: Controller, run_id: str) -> float:
    """The memory per process the task's key resolves to now; it must be learned."""
    (task,) = await c.store.tasks(run_id)
    assert task.resource_key is not None
    resolved = await c.resources.resolve(
        ResourceKey.from_text(task.resource_key), TYPES[task.type].hint, None
    )
    assert resolved.source.startswith("learned"), resolved
    return resolved.memory_per_worker_gb


async def finish(c: Controller, run_id: str) -> str:
    """Step and run bursts until the run ended; its state."""
    for _ in range(20):
        await steps(c)
        run = await c.store.run(run_id)
        assert run is not None
        if run.state != "running":
            return run.state
        await burst(c)
    raise AssertionError("the run did not end")


async def test_a_fresh_key_probes_first_and_the_rest_gets_the_learned_request(
    controller: Controller, tmp_path: Path
) -> None:
    """A task of 40 units of a key never seen, 2 worker processes: only a probe of 2 units
    (one job each, at the hint) goes out; the task says "probing" (its view, the progress
    lines and `simrun status`) and sends nothing more while the probe runs; once the probe
    reported, the other 38 go out with the learned request, below the hint, the status is
    cleared, and the run ends with every unit computed once."""
    c = controller
    run_id = await submit(c, doc("svc-roomy", 40))
    await steps(c)
    probe = await jobs(c, run_id)
    assert [(j.units, j.memory_gb) for j in probe] == [(1, ROOMY.hint.memory_per_worker_gb)] * 2
    assert len(await c.queue.queued_job_ids("cpu")) == 2
    task = await task_view(c, run_id)
    assert task.status == "probing: 2 units first, the other 38 wait for their memory"
    assert (task.state, task.count("queued"), task.count("pending")) == ("running", 2, 38)
    view = await c.queries.run(run_id)
    assert view is not None
    assert any(task.status in line for line in plain_lines(view, only_active=False))
    # the store is in use, as by the session of `simrun run` (a free store's running run
    # reads as interrupted)
    with store_lock.take(c.settings.store):
        shown = await asyncio.to_thread(
            simrun, "status", run_id, "--store", str(c.settings.store), cwd=tmp_path
        )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "probing: 2 units first, the other 38 wait for their memory" in shown.stdout

    await steps(c)  # nothing more while the probe has not reported
    assert [j.id for j in await jobs(c, run_id)] == [j.id for j in probe]

    await burst(c)
    await steps(c, 1)  # the probe's reports are taken in and the rest goes out
    learned_gb = await learned_request(c, run_id)
    assert learned_gb < ROOMY.hint.memory_per_worker_gb
    rest = await jobs(c, run_id)
    assert rest, "the rest did not go out after the probe's report"
    assert {j.memory_gb for j in rest} == {learned_gb}
    task = await task_view(c, run_id)
    assert task.status == ""
    assert task.count("done") == 2
    assert task.count("queued") == 38

    assert await finish(c, run_id) == "succeeded"
    assert calls(c.settings.store / "runs" / run_id / "work" / "out") == dict.fromkeys(range(40), 1)


async def test_a_restart_while_probing_neither_repeats_the_probe_nor_loses_the_rest(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """The probe's state is in SQLite (the status, the jobs in flight, the key's
    observations): a service restarted while the probe runs sends no second probe and
    holds the rest, then sends it with the learned request once the probe reported."""
    options = settings(tmp_path / "store", redis_url, redis_prefix)
    first = await Controller.open(options, TYPES)
    try:
        await beat(first)
        run_id = await submit(first, doc("svc-roomy", 20))
        await steps(first)
        probe = [j.id for j in await jobs(first, run_id)]
    finally:
        await first.close()
    assert len(probe) == PROCESSES
    c = await Controller.open(options, TYPES)
    try:
        await steps(c)
        assert [j.id for j in await jobs(c, run_id)] == probe
        assert (await task_view(c, run_id)).status.startswith("probing:")
        await burst(c)
        await steps(c, 1)
        rest = await jobs(c, run_id)
        assert sum(j.units for j in rest) == 20 - PROCESSES
        assert {j.memory_gb for j in rest} == {await learned_request(c, run_id)}
        assert await finish(c, run_id) == "succeeded"
    finally:
        await c.close()


async def test_a_probe_sent_before_any_worker_was_seen_grows_to_one_unit_per_process(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Before the first heartbeat of a worker the service counts one process: the probe is
    one unit; once a worker of 2 processes is seen, and while no report came, it grows to
    one unit per process, and the status counts both."""
    c = await Controller.open(settings(tmp_path / "store", redis_url, redis_prefix), TYPES)
    try:
        run_id = await submit(c, doc("svc-roomy", 20))
        await steps(c)
        assert sum(j.units for j in await jobs(c, run_id)) == 1
        assert (await task_view(c, run_id)).status.startswith("probing: 1 unit first")
        await beat(c)
        await steps(c)
        assert [j.units for j in await jobs(c, run_id)] == [1] * PROCESSES
        status = (await task_view(c, run_id)).status
        assert status == "probing: 2 units first, the other 18 wait for their memory"
    finally:
        await c.close()


async def test_a_task_of_two_units_is_not_probed(controller: Controller) -> None:
    """A task of 2 units of a fresh key is not probed (waiting for one would double its
    time): both go out at once with the hint, and no status says probing."""
    c = controller
    run_id = await submit(c, doc("svc-roomy", 2))
    await steps(c)
    sent = await jobs(c, run_id)
    assert sum(j.units for j in sent) == 2
    assert {j.memory_gb for j in sent} == {ROOMY.hint.memory_per_worker_gb}
    assert (await task_view(c, run_id)).status == ""


async def test_a_key_with_history_is_not_probed(controller: Controller) -> None:
    """A task of a key that has an observation is not probed: its units go out at once, as
    many as the window holds, with the learned request."""
    c = controller
    key = ResourceKey("svc-roomy", "", "known")
    report = WorkerReport(peak_memory_gb=(0.05,), seconds_per_unit=0.01, units=1, limit_gb=1.0)
    await c.resources.record(key, report, 0.25, run="earlier")
    run_id = await submit(c, doc("svc-roomy", 40, tag="known"))
    await steps(c)
    sent = await jobs(c, run_id)
    assert sum(j.units for j in sent) == 40
    assert {j.memory_gb for j in sent} == {await learned_request(c, run_id)}
    assert (await task_view(c, run_id)).status == ""


async def test_a_probe_killed_for_memory_sends_the_rest_at_the_kill_floor(
    controller: Controller,
) -> None:
    """A probe whose units need more than the hint is killed for memory: the kill is the
    key's observation, so the rest goes out at RETRY_FACTOR times the killed limit and
    succeeds, and only the probe's units were ever killed (without the probe, every unit
    would have been killed once)."""
    c = controller
    run_id = await submit(c, doc("svc-work", 12, hog_mb=300, tag="hog"))
    await steps(c)
    assert sum(j.units for j in await jobs(c, run_id)) == PROCESSES
    await burst(c)
    await steps(c, 1)
    floor_gb = RETRY_FACTOR * WORK.hint.memory_per_worker_gb
    assert await learned_request(c, run_id) == pytest.approx(floor_gb)
    rest = await jobs(c, run_id)
    assert sum(j.units for j in rest) == 12
    assert [j.memory_gb for j in rest] == pytest.approx([floor_gb] * len(rest))
    assert await finish(c, run_id) == "succeeded"
    units = [u for u in await c.store.units(run_id, "work") if u.kind == "chunk"]
    assert sorted(u.index for u in units if u.kills) == [0, 1]


async def test_the_rest_waits_for_every_probe_unit(controller: Controller) -> None:
    """The rest of a probing task goes out only once every probe unit reported (it is then
    sized from all of their peaks): after the first of 2 probe reports nothing more goes out
    and the task still says probing; after the second the other 38 go out."""
    c = controller
    run_id = await submit(c, doc("svc-roomy", 40))
    await steps(c)
    probe = await jobs(c, run_id)
    assert len(probe) == 2
    redis, keys = c.queue.redis, c.queue.keys

    def report(job: JobRow, peak_gb: float) -> dict[str, str]:
        index = int(job.id.rsplit(":", 2)[1])  # RUN:TASK:FIRST:ATTEMPT; one unit each
        return ReportEntry(
            job_id=job.id, run=run_id, task="work", kind="chunk", attempt=1, worker_id="w",
            outcomes={index: "done"},  # type: ignore[dict-item]
            report=WorkerReport(
                peak_memory_gb=(peak_gb,), seconds_per_unit=0.05, units=1, limit_gb=1.0
            ), started=1.0, finished=2.0,
        ).to_fields(c.queue.key)  # fmt: skip

    await redis.xadd(keys.reports, report(probe[0], 0.3))  # type: ignore[arg-type]
    await steps(c)
    assert len(await jobs(c, run_id)) == 1  # the other probe job, nothing more
    assert (await task_view(c, run_id)).status.startswith("probing")
    await redis.xadd(keys.reports, report(probe[1], 0.35))  # type: ignore[arg-type]
    await steps(c)
    rest = await jobs(c, run_id)
    assert sum(j.units for j in rest) == 38
    assert all(j.memory_gb < ROOMY.hint.memory_per_worker_gb for j in rest)
    assert (await task_view(c, run_id)).status == ""
