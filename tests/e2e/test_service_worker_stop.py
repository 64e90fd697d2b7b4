"""A worker container stopped in the middle of a service run, the way ``docker compose
stop`` (or Kubernetes) stops it: SIGTERM to the worker process, then a grace period. It
finishes or hands back its running units within that period, and none is lost or done
twice: with a second worker running, the run succeeds and every unit completes exactly
once.

Real parts throughout: a Redis server, the controller in this process, SQLite, and two
worker containers as child processes running ``svc-count`` (tests/support/service_tasks.py),
whose units log every computation begun and every one completed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from simrun.core.states import UnitRow
from simrun.runstore.rows import RunRow
from tests.support.service_harness import Service, service, start_worker, stop_worker
from tests.support.service_tasks import COUNT_LOG

pytestmark = pytest.mark.e2e

#: Seconds a stopping worker may take after its grace period to hand back and report
#: (as tests/integration/test_deploy_files.py allows between --grace-s and stop_grace_period).
HAND_BACK_S = 10.0


def count_doc(units: int, seconds: float) -> str:
    """A one-task workflow of ``svc-count``."""
    task = {"name": "count", "type": "svc-count", "settings": {"units": units, "seconds": seconds}}
    return json.dumps({"name": "stop", "tasks": [task]})


def computations(out: Path) -> tuple[Counter[int], Counter[int]]:
    """How often each unit's computation began, and how often it completed."""
    begun: Counter[int] = Counter()
    completed: Counter[int] = Counter()
    for line in (out / COUNT_LOG).read_text().splitlines():
        what, index, _pid = line.split()
        (begun if what == "start" else completed)[int(index)] += 1
    return begun, completed


async def stop_mid_run(
    svc: Service, run_id: str, leaving: subprocess.Popen[bytes], busy: int, timeout_s: float
) -> tuple[set[int], float, int]:
    """Once the worker "leaving" runs ``busy`` units of the run, SIGTERM it (the worker
    process alone, as tini forwards it) and wait for it to exit: the units it was running,
    the seconds it took to exit, and its exit status."""

    async def leaving_runs() -> list[UnitRow]:
        running = await svc.controller.store.units(run_id, "count", states=["running"])
        return [u for u in running if u.worker == "leaving"]

    async def busy_enough() -> bool:
        return len(await leaving_runs()) >= busy

    await svc.until(busy_enough)
    held = {u.index for u in await leaving_runs()}
    started = time.monotonic()
    leaving.send_signal(signal.SIGTERM)
    status = await asyncio.to_thread(leaving.wait, timeout_s)
    return held, time.monotonic() - started, status


class Stopped(NamedTuple):
    """A run during which the worker "leaving" was stopped, and what stopping it did."""

    run: RunRow
    units: list[UnitRow]
    held: set[int]  # the units it ran when it was signalled
    took_s: float  # from the signal to its exit
    status: int  # its exit status
    out: Path  # the output directory of the run's task (its COUNT_LOG)


async def stop_a_worker_mid_run(
    store: Path,
    redis_url: str,
    prefix: str,
    doc: str,
    *,
    grace_s: float,
    busy: int = 1,
    staying_processes: int = 2,
    learn_first: str | None = None,
    **service_options: Any,
) -> Stopped:
    """Workers "leaving" (with ``grace_s``) and "staying" and the controller: ``doc`` is
    submitted (once ``learn_first`` ran to success) and "leaving" stopped by `stop_mid_run`
    once it runs ``busy`` of its units; returns when the run ended."""
    leaving = start_worker(redis_url, prefix, store=store, worker_id="leaving", grace_s=grace_s)
    staying = start_worker(
        redis_url, prefix, store=store, worker_id="staying", processes=staying_processes
    )
    try:
        async with service(store, redis_url, prefix, **service_options) as svc:
            if learn_first is not None:
                first = await svc.submit(learn_first)
                assert (await svc.wait(first, timeout_s=60)).state == "succeeded"
            run_id = await svc.submit(doc)
            held, took_s, status = await stop_mid_run(
                svc, run_id, leaving, busy, grace_s + HAND_BACK_S
            )
            run = await svc.wait(run_id, timeout_s=90)
            units = await svc.controller.store.units(run_id, "count")
    finally:
        stop_worker(leaving)
        stop_worker(staying)
    return Stopped(run, units, held, took_s, status, store / "runs" / run_id / "count" / "out")


async def test_stopped_worker_finishes_its_running_units_within_the_grace_period(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """SIGTERM to a worker whose running units need less than its grace period: it lets
    them complete, takes nothing new, and exits 0 before the grace period is over; the
    run succeeds with the other worker, every unit begun once and completed once, and the
    units it was running are done by it."""
    grace_s = 8.0
    run, units, held, took_s, status, out = await stop_a_worker_mid_run(
        tmp_path / "store", redis_url, redis_prefix, count_doc(units=16, seconds=1.0),
        grace_s=grace_s,
    )  # fmt: skip
    assert status == 0
    assert took_s < grace_s, f"the worker took {took_s:.1f} s to finish 1 s units"
    assert run.state == "succeeded", run.message
    assert len(units) == 16
    assert {u.state for u in units} == {"done"}
    by_index = {u.index: u for u in units}
    assert held
    assert all(by_index[i].worker == "leaving" for i in held), [by_index[i] for i in held]
    assert any(u.worker == "staying" for u in units)
    begun, completed = computations(out)
    assert completed == Counter(range(16)), completed
    assert begun == Counter(range(16)), begun


async def test_stopped_worker_hands_back_what_it_cannot_finish_in_the_grace_period(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """SIGTERM to a worker whose running units need longer than its grace period: when
    the period is over it stops them and hands them back, and exits 0 soon after; the
    other worker computes them again (a new attempt) and the run succeeds with every unit
    completed exactly once, the handed-back ones begun twice."""
    grace_s = 0.5
    # As many units as the two workers hold at once (2 + 2 and 3 + 3 with prefetch):
    # "leaving" surely gets some. It is stopped with both of its processes busy: it cannot
    # start another unit before the signal. Units of 4 s: on a loaded machine the store may
    # learn late that a unit runs, and it must still need more than the grace period then.
    run, units, held, took_s, status, out = await stop_a_worker_mid_run(
        tmp_path / "store", redis_url, redis_prefix, count_doc(units=10, seconds=4.0),
        grace_s=grace_s, busy=2, staying_processes=3,
    )  # fmt: skip
    assert status == 0
    assert took_s < grace_s + HAND_BACK_S
    assert run.state == "succeeded", run.message
    assert len(units) == 10
    assert {u.state for u in units} == {"done"}
    by_index = {u.index: u for u in units}
    assert held
    for index in held:
        assert by_index[index].worker == "staying", by_index[index]
        assert by_index[index].attempt > 1, by_index[index]
    begun, completed = computations(out)
    assert completed == Counter(range(10)), completed
    assert all(begun[i] == 2 for i in held), begun
    assert all(begun[i] == 1 for i in range(10) if i not in held), begun


async def test_stopped_worker_hands_back_the_rest_of_its_chunks(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Once seconds per unit are learned, a job carries a chunk of several units. SIGTERM
    to a worker in the middle of its chunks, with a grace period shorter than a chunk: it
    completes what it can, hands back the rest of each chunk, and exits 0; the other
    worker computes the rest and the run succeeds with every unit completed exactly once."""
    grace_s = 0.6
    # About 2 s of work per job (chunks of 8 units of 0.25 s), learned from a first run.
    run, units, held, took_s, status, out = await stop_a_worker_mid_run(
        tmp_path / "store", redis_url, redis_prefix, count_doc(units=48, seconds=0.25),
        grace_s=grace_s, learn_first=count_doc(units=8, seconds=0.25), target_job_s=2.0,
    )  # fmt: skip
    jobs = {u.job_id for u in units if u.job_id is not None}
    assert status == 0
    assert took_s < grace_s + HAND_BACK_S
    assert run.state == "succeeded", run.message
    assert len(units) == 48
    assert {u.state for u in units} == {"done"}
    assert len(jobs) < 48, "no job carried more than one unit"
    by_index = {u.index: u for u in units}
    assert len(held) > 1, held  # the units of a chunk
    assert any(by_index[i].worker == "staying" and by_index[i].attempt > 1 for i in held)
    begun, completed = computations(out)
    assert completed == Counter(range(48)), completed
    assert set(begun) == set(range(48))
    assert max(begun.values()) <= 2, begun
