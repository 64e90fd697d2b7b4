"""The API's ETA over a real controller (real Redis, real SQLite) and a manual clock: a
fake worker of 2 processes takes the queued jobs and reports them as a worker would, each
unit taking 1 s of the clock while its reports claim 10 ms of compute (the overhead of a
no-op unit: what is learned is far too short), and ``GET /runs/RUN`` is asked each second.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from arq.constants import job_key_prefix

from simrun.core.clock import ManualClock
from simrun.core.jobs import JobSpec
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.signing import JobCodec
from simrun.plugins import load_types
from simrun.service.controller import Controller, ControllerSettings
from simrun.service.routes import create_app
from simrun.worker.heartbeat import Heartbeat
from simrun.workflow import check_workflow, parse_workflow
from tests.support.heartbeats import worker_info
from tests.support.service_tasks import REFS

pytestmark = pytest.mark.redis

TYPES = load_types(REFS)
UNITS = 120
UNIT_S = 1.0  # what a unit takes on the clock
CLAIMED_S = 0.01  # what its reports say it computed


@pytest.fixture
async def eta_controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    """A controller on a manual clock whose jobs carry at most 2 units, reconciling only
    at start (the fake worker keeps a job queued until its report is taken in). It does not
    probe (``probe=False``): the rule checked is the ETA at a steady rate, which the pause
    of a probe at the start would bend."""
    settings = ControllerSettings(
        store=tmp_path / "store",
        redis_url=redis_url,
        prefix=redis_prefix,
        window_jobs=8,
        max_chunk=3,
        reconcile_s=1e9,
        probe=False,
    )
    c = await Controller.open(settings, TYPES, clock=ManualClock())
    yield c
    await c.close()


@dataclass
class Slot:
    spec: JobSpec
    left_s: float


class FakeWorker:
    """Two processes that run the queued jobs one after the other on the controller's
    clock (``UNIT_S`` per unit) and report each when it ends; a heartbeat lists them."""

    def __init__(self, c: Controller, processes: int = 2) -> None:
        self.c = c
        self.slots: list[Slot | None] = [None] * processes
        self.taken: set[str] = set()
        self.done: list[str] = []

    async def beat(self) -> None:
        now = time.time()
        info = worker_info(
            "fake", queues=("cpu",), memory_gb=8.0, processes=len(self.slots),
            started=now, updated=now,
        )  # fmt: skip
        keys = self.c.queue.keys
        await Heartbeat(self.c.queue.redis, keys, lambda: info, interval_s=1, ttl_s=60).beat()

    async def take(self) -> None:
        queue = self.c.queue
        for job_id in await queue.queued_job_ids("cpu"):
            free = [i for i, s in enumerate(self.slots) if s is None]
            if not free:
                return
            if job_id in self.taken:
                continue
            raw = await queue.redis.get(job_key_prefix + queue.keys.arq_job_id(job_id))
            spec = JobSpec.from_dict(JobCodec(self.c.queue.key).deserialize(raw)["a"][0])
            if spec.kind != "chunk":
                continue
            self.taken.add(job_id)
            self.slots[free[0]] = Slot(spec, UNIT_S * len(spec.indices))

    async def run(self, seconds: float) -> int:
        """Run ``seconds`` of the clock; the units whose reports went out."""
        reported = 0
        for i, slot in enumerate(self.slots):
            if slot is None:
                continue
            slot.left_s -= seconds
            if slot.left_s > 1e-9:
                continue
            spec = slot.spec
            entry = ReportEntry(
                job_id=spec.job_id, run=spec.run, task=spec.task, kind="chunk",
                attempt=spec.attempt, worker_id="fake",
                outcomes=dict.fromkeys(spec.indices, "done"),  # type: ignore[arg-type]
                report=WorkerReport(
                    peak_memory_gb=(0.1,), seconds_per_unit=CLAIMED_S,
                    units=len(spec.indices), limit_gb=1.0,
                ),
                started=1.0, finished=2.0,
            )  # fmt: skip
            await self.c.queue.redis.xadd(
                self.c.queue.keys.reports, entry.to_fields(self.c.queue.key)
            )  # type: ignore[arg-type]
            self.done.append(spec.job_id)
            self.slots[i] = None
            reported += len(spec.indices)
        return reported

    async def forget_reported(self) -> None:
        """Take the reported jobs out of the queue (once the controller took them in)."""
        await self.c.queue.drop_jobs("cpu", self.done)
        self.done = []


async def test_api_eta_follows_the_observed_rate(eta_controller: Controller) -> None:
    """The API's ``eta_s`` (of the run and of its task) is the remaining units over the
    observed completion rate once a few units finished, not the learned seconds per unit
    (100 times too short here): from 10 % done on, within 25 % of the real remaining
    time while a few seconds are left; the task's view shows the observed rate."""
    c = eta_controller
    clock = c.clock
    assert isinstance(clock, ManualClock)
    text = json.dumps(
        {"tasks": [{"name": "work", "type": "svc-work", "settings": {"units": UNITS}}]}
    )
    doc = parse_workflow(text)
    run_id = await c.submit(doc, check_workflow(doc, TYPES), text)
    worker = FakeWorker(c)
    await worker.beat()
    transport = httpx.ASGITransport(app=create_app(c))
    seen: list[tuple[float, int, float | None, float | None, float | None, float | None]] = []
    finished = 0
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
        for second in range(int(UNITS * UNIT_S) + 30):
            if second % 10 == 0:
                await worker.beat()
            await c.step()
            await worker.forget_reported()
            await worker.take()
            view = (await api.get(f"/runs/{run_id}")).json()
            task = view["tasks"][0]
            seen.append(
                (
                    clock.monotonic(),
                    task["counts"]["done"],
                    view["eta_s"],
                    task["eta_s"],
                    task["seconds_per_unit"],
                    task["units_per_s"],
                )
            )
            if task["counts"]["done"] == UNITS:
                break
            clock.advance(1.0)
            finished += await worker.run(1.0)
    assert finished == UNITS
    end = seen[-1][0]  # the last units' report was taken in
    checked = 0
    for now, done, run_eta, task_eta, spu, rate in seen:
        if done < UNITS / 10 or end - now < 4:
            continue
        real = end - now
        assert run_eta == task_eta
        assert run_eta is not None
        assert abs(run_eta - real) <= 0.25 * real, (now, done, run_eta, real)
        assert spu == pytest.approx(CLAIMED_S)  # what is learned: the claimed compute
        learned = (UNITS - done) * spu / 2
        assert run_eta > 10 * learned  # far from the learned speed's ETA
        assert rate == pytest.approx(2 / UNIT_S, rel=0.25)
        checked += 1
    assert checked >= 20


async def test_api_eta_grows_while_nothing_finishes(eta_controller: Controller) -> None:
    """When the units stop finishing (the worker stalls), the API's ETA grows with each
    second beyond the usual gap between reports, and follows the rate again after."""
    c = eta_controller
    clock = c.clock
    assert isinstance(clock, ManualClock)
    text = json.dumps(
        {"tasks": [{"name": "work", "type": "svc-work", "settings": {"units": UNITS}}]}
    )
    doc = parse_workflow(text)
    run_id = await c.submit(doc, check_workflow(doc, TYPES), text)
    worker = FakeWorker(c)
    await worker.beat()
    etas: list[float] = []
    transport = httpx.ASGITransport(app=create_app(c))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as api:
        for second in range(50):
            stalled = 20 <= second < 35
            await c.step()
            await worker.forget_reported()
            await worker.take()
            view = (await api.get(f"/runs/{run_id}")).json()
            etas.append(view["eta_s"])
            clock.advance(1.0)
            if not stalled:
                await worker.run(1.0)
    before = etas[20]
    assert all(later > earlier for earlier, later in pairwise(etas[23:35]))
    assert etas[34] > 1.5 * before
    assert etas[49] < etas[34]
