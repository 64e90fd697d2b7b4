"""/metrics and /backlog over a real controller (real Redis, real SQLite) with a submitted
run: the text parses with the Prometheus client's parser and the numbers follow the store,
the learned resources and the live workers' heartbeats.

No worker process runs: the controller is stepped by hand (its tasks start and their
units stay queued or pending), and a worker's heartbeat is written the way a worker
writes it when a test needs a live one.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simrun.core.reports import ReportEntry, WorkerReport
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support import REPO
from tests.support.heartbeats import worker_info

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()
PLATE = (REPO / "examples" / "plate.json").read_bytes()
#: examples/heat.yaml's sweep: 4 diffusivities x 6 boundary temperatures.
SWEEP_UNITS = 24
TOKEN = "metrics-token"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a /metrics answer, by name and labels, through the Prometheus
    client's parser (which raises on text it cannot read)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def cpu(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("queue", "cpu"),))


async def submit_heat(api: httpx.AsyncClient, controller: Controller) -> str:
    """Submit examples/heat.yaml and step the controller until its sweep has units (some
    queued, the rest pending: no worker takes them)."""
    upload = {"filename": "plate.json", "content_b64": base64.b64encode(PLATE).decode()}
    response = await api.post("/runs", json={"workflow": HEAT, "sources": {"plate": upload}})
    assert response.status_code == 201, response.text
    run_id = str(response.json()["run"])
    for _ in range(5):
        await controller.step()
    counts = await controller.store.counts(run_id)
    assert counts["sweep"].unfinished == SWEEP_UNITS
    return run_id


async def beat(controller: Controller, memory_gb: float, processes: int, **more: Any) -> None:
    """A live worker of the cpu queue, as its heartbeat says it (the keys a worker writes)."""
    now = time.time()
    info = worker_info(
        f"w-{memory_gb:g}-{processes}", memory_gb=memory_gb, processes=processes, host="test",
        started=now, updated=now, **more,
    )  # fmt: skip
    redis, keys = controller.queue.redis, controller.queue.keys
    await redis.set(keys.worker(info.id), info.to_json(), ex=60)
    await redis.zadd(keys.workers, {info.id: now})


async def test_metrics_parse_and_show_the_backlog_of_a_submitted_run(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """With a run's 24 units not done and no worker: /metrics answers the text format 0.0.4,
    every family has HELP and TYPE, the cpu backlog is 24 units of default-time work
    (60 s each), more than zero workers are desired (with the default 8 GiB x 4 shape),
    no worker is live, one run runs, and the report stream is empty."""
    await submit_heat(api, controller)
    response = await api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    got = samples(text)
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP")}
    assert names == helps
    assert got[cpu("simrun_backlog_units")] == SWEEP_UNITS
    assert got[cpu("simrun_backlog_seconds")] == SWEEP_UNITS * 60.0
    assert got[cpu("simrun_desired_workers")] > 0
    assert got[cpu("simrun_desired_workers_processes")] == 4
    assert got[cpu("simrun_workers")] == 0
    assert got[cpu("simrun_units_done")] == 0
    assert got[("simrun_running_runs", ())] == 1
    assert got[("simrun_redis_up", ())] == 1
    assert got[("simrun_report_stream_entries", ())] == 0
    assert got[("simrun_report_oldest_age_seconds", ())] == 0


async def test_live_workers_give_their_shape_and_capacity(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """A live worker's heartbeat shows in the capacity of its queue, and the desired workers
    are decided with its shape: 24 default units over 2 processes drain in
    24 x 60 / 2 / 600 = 1.2 -> 2 containers."""
    await submit_heat(api, controller)
    await beat(controller, memory_gb=4.0, processes=2)
    got = samples((await api.get("/metrics")).text)
    assert got[cpu("simrun_workers")] == 1
    assert got[cpu("simrun_worker_memory_gib")] == 4.0
    assert got[cpu("simrun_worker_processes")] == 2
    assert got[cpu("simrun_worker_gpus")] == 0
    assert got[cpu("simrun_desired_workers_processes")] == 2
    assert got[cpu("simrun_desired_workers")] == 2


async def test_report_lag_counts_what_the_controller_did_not_ingest(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """Entries added to the report stream and not read yet are its length, with the age of
    the oldest (an id a minute old by the Redis clock is about 60 s old)."""
    redis, stream = controller.queue.redis, controller.queue.keys.reports
    seconds, _micros = await redis.time()
    old_ms = int(seconds) * 1000 - 60_000
    await redis.xadd(stream, {"v": "1"}, id=f"{old_ms}-0")
    await redis.xadd(stream, {"v": "1"})
    got = samples((await api.get("/metrics")).text)
    assert got[("simrun_report_stream_entries", ())] == 2
    assert got[("simrun_report_stream_pending", ())] == 0
    assert 59 <= got[("simrun_report_oldest_age_seconds", ())] < 120


async def test_backlog_json_lists_units_by_key_and_the_worker_shape(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """/backlog gives per queue the units by resource key with their learned (here: none)
    seconds per unit and memory per worker, and the live workers' count and shape (null
    while none is live)."""
    await submit_heat(api, controller)
    body = (await api.get("/backlog")).json()
    (queue,) = body["queues"]
    assert queue["queue"] == "cpu"
    assert queue["units"] == SWEEP_UNITS
    assert queue["workers"] == 0
    assert queue["shape"] is None
    (entry,) = queue["entries"]
    assert entry["key"].startswith("heat/")
    assert entry["units"] == SWEEP_UNITS
    assert entry["seconds_per_unit"] is None
    assert entry["memory_per_worker_gb"] > 0

    await beat(controller, memory_gb=16.0, processes=8)
    queue = (await api.get("/backlog")).json()["queues"][0]
    assert queue["workers"] == 1
    assert queue["shape"] == {"memory_gb": 16.0, "processes": 8}


async def report_unit(controller: Controller, run_id: str, index: int, outcome: str) -> None:
    """Report ``outcome`` for sweep unit ``index`` in its current job, the way a worker
    adds it to the stream, and step the controller (which dispatches it again if it is to
    run again)."""
    (unit,) = [u for u in await controller.store.units(run_id, "sweep") if u.index == index]
    assert unit.state == "queued"
    assert unit.job_id is not None
    assert unit.memory_gb is not None
    # A kill measured the peak past the limit; an error measured nothing (so nothing is
    # learned and the chunks stay one unit each).
    measured = (
        WorkerReport(
            peak_memory_gb=(unit.memory_gb * 1.01,),
            seconds_per_unit=None,
            units=1,
            limit_gb=unit.memory_gb,
            killed_for_memory=True,
        )
        if outcome == "killed"
        else WorkerReport(
            peak_memory_gb=(), seconds_per_unit=None, units=0, limit_gb=unit.memory_gb
        )
    )
    entry = ReportEntry(
        job_id=unit.job_id, run=run_id, task="sweep", kind="chunk", attempt=unit.attempt,
        worker_id="w", outcomes={index: outcome},  # type: ignore[dict-item]
        errors={index: "Traceback: boom"} if outcome == "failed" else {},
        report=measured, started=1.0, finished=2.0,
    )  # fmt: skip
    await controller.queue.redis.xadd(
        controller.queue.keys.reports, entry.to_fields(controller.queue.key)
    )  # type: ignore[arg-type]
    await controller.step()


async def test_killed_for_memory_counts_every_kill_of_the_tasks_across_replays(
    api: httpx.AsyncClient, controller: Controller
) -> None:
    """simrun_units_killed_for_memory is the kills for memory kept on the running runs'
    task rows: every kill counts (unit 0 killed twice counts twice), and a replay, which
    zeroes the kills of the units it puts back, leaves it as it was."""
    run_id = await submit_heat(api, controller)
    got = samples((await api.get("/metrics")).text)
    assert got[cpu("simrun_units_killed_for_memory")] == 0
    for index in (0, 0, 1, 3):
        await report_unit(controller, run_id, index, "killed")
    for _ in range(3):  # max_retries 2: the third error fails unit 3 for good
        await report_unit(controller, run_id, 3, "failed")
    units = {u.index: u for u in await controller.store.units(run_id, "sweep")}
    assert (units[0].kills, units[1].kills, units[3].kills, units[3].state) == (2, 1, 1, "failed")
    got = samples((await api.get("/metrics")).text)
    assert got[cpu("simrun_units_killed_for_memory")] == 4
    assert got[cpu("simrun_units_failed")] == 1
    assert await controller.replay(run_id, task="sweep", indices=[3]) == 1
    (unit3,) = [u for u in await controller.store.units(run_id, "sweep") if u.index == 3]
    assert (unit3.state, unit3.kills) == ("pending", 0)
    got = samples((await api.get("/metrics")).text)
    assert got[cpu("simrun_units_killed_for_memory")] == 4
    assert got[cpu("simrun_units_failed")] == 0


async def test_metrics_and_backlog_need_the_token_when_set(controller: Controller) -> None:
    """With a token, /metrics and /backlog answer 401 without it and 200 with it."""
    transport = httpx.ASGITransport(app=create_app(controller, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        for path in ("/metrics", "/backlog"):
            assert (await client.get(path)).status_code == 401, path
            right = {"Authorization": f"Bearer {TOKEN}"}
            assert (await client.get(path, headers=right)).status_code == 200, path
