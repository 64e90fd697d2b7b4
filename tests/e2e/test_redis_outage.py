"""Redis going away mid-run and coming back on the same port, with or without its data: the
worker containers and the service ride it out with no hand-restart, the run succeeds, and
every unit is computed exactly once (no report lost, none counted twice).

Real parts throughout: a private redis-server of the test (SIGKILLed and started again), the
controller's loop in this process, two worker containers as child processes running the
svc-work test type, whose units append a line to ``calls-<index>.log`` each time they are
computed.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simrun.local.machine import LocalError
from simrun.local.redis import PrivateRedis
from simrun.worker.container import WorkerFlags, worker_argv
from tests.support import REPO
from tests.support.harness import spawn
from tests.support.service_harness import (
    HEARTBEAT_S,
    HEARTBEAT_TTL_S,
    service,
    stop_worker,
    work_doc,
)
from tests.support.service_tasks import REFS
from tests.support.units import calls

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("redis-outage")]

UNITS = 32
OUTAGE_S = 3.0


def _server(persist: bool) -> Iterator[PrivateRedis]:
    server = PrivateRedis(persist=persist)
    try:
        server.start()
    except LocalError as error:
        pytest.fail(str(error))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def empty_redis() -> Iterator[PrivateRedis]:
    """A private redis-server without persistence: restarted, it comes back empty."""
    yield from _server(persist=False)


@pytest.fixture
def durable_redis() -> Iterator[PrivateRedis]:
    """A private redis-server with an append-only file synced at every write: killed and
    restarted, it comes back with all its data."""
    yield from _server(persist=True)


def _start_worker(url: str, prefix: str, worker_id: str, log: Path) -> subprocess.Popen[bytes]:
    flags = WorkerFlags(
        queues=("cpu",), redis_url=url, prefix=prefix, memory_gb=2.0, processes=2,
        worker_id=worker_id, grace_s=2.0, plugins=tuple(REFS), python_path=(str(REPO),),
        poll_delay_s=0.01, heartbeat_s=HEARTBEAT_S, heartbeat_ttl_s=HEARTBEAT_TTL_S,
    )  # fmt: skip
    with log.open("wb") as out:
        return spawn(
            worker_argv(flags),
            None,
            stdout=subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,
        )


def _started_in(out: Path, first: float, last: float) -> int:
    """How many unit computations began between ``first`` and ``last`` (unix seconds)."""
    found = 0
    for path in out.glob("calls-*.log"):
        for line in path.read_text().splitlines():
            if first <= float(line.split()[1]) <= last:
                found += 1
    return found


async def _ride_out(tmp_path: Path, server: PrivateRedis, prefix: str) -> dict[str, object]:
    """A run of ``UNITS`` units on two workers, Redis SIGKILLed mid-run for ``OUTAGE_S``
    and started again on its port; what happened."""
    url = server.url
    store = tmp_path / "store"
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    procs = [_start_worker(url, prefix, f"w{i}", log) for i, log in enumerate(logs)]
    try:
        async with service(store, url, prefix) as svc:
            run_id = await svc.submit(work_doc(units=UNITS, seconds=0.25))
            rs = svc.controller.store

            async def some_done() -> bool:
                counts = await rs.counts(run_id)
                return "work" in counts and counts["work"].done >= 6

            await svc.until(some_done)
            down_at = time.time()
            server.kill()
            await asyncio.sleep(OUTAGE_S)
            exited = [p.poll() for p in procs]
            server.start()
            back_at, back_mono = time.time(), time.monotonic()
            run = await svc.wait(run_id, timeout_s=120)
            recovery_s = time.monotonic() - back_mono
            units = [u for u in await rs.units(run_id, "work") if u.kind == "chunk"]
            still = [p.poll() for p in procs]
    finally:
        for proc in procs:
            stop_worker(proc)
    out = store / "runs" / run_id / "work" / "out"
    print(f"run ended {recovery_s:.1f} s after Redis came back")
    return {
        "run": run,
        "units": units,
        "calls": calls(out),
        "during": _started_in(out, down_at, back_at),
        "exited": exited,
        "still": still,
        "logs": "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs),
    }


def _check(seen: dict[str, object]) -> None:
    logs = seen["logs"]
    assert seen["exited"] == [None, None], f"a worker exited while Redis was away\n{logs}"
    assert seen["still"] == [None, None], f"a worker exited after Redis came back\n{logs}"
    run = seen["run"]
    assert run.state == "succeeded", f"{run.message}\n{logs}"  # type: ignore[attr-defined]
    units = seen["units"]
    assert sorted(u.index for u in units if u.state == "done") == list(range(UNITS))  # type: ignore[attr-defined]
    assert seen["calls"] == dict.fromkeys(range(UNITS), 1), f"a unit was computed twice\n{logs}"
    assert seen["during"], "no unit was computed while Redis was away"


async def test_redis_restarted_with_its_data_is_ridden_out(
    tmp_path: Path, durable_redis: PrivateRedis, redis_prefix: str
) -> None:
    """Redis SIGKILLed mid-run and started again with its data (append-only file): both
    workers stay up and keep computing what they hold, their reports of the outage reach
    the service once Redis is back, no worker is taken for dead, no unit is dispatched
    again, and every unit is computed exactly once."""
    seen = await _ride_out(tmp_path, durable_redis, redis_prefix)
    _check(seen)
    units = seen["units"]
    again = [u.index for u in units if u.attempt > 1]  # type: ignore[attr-defined]
    assert again == [], f"units dispatched again though Redis kept its data: {again}"


async def test_redis_restarted_empty_is_ridden_out(
    tmp_path: Path, empty_redis: PrivateRedis, redis_prefix: str
) -> None:
    """Redis SIGKILLed mid-run and started again empty (no persistence: queues, attempts,
    heartbeats and reports gone): both workers stay up, deliver the reports they kept, the
    service dispatches again only what was not done, and every unit is computed exactly
    once."""
    _check(await _ride_out(tmp_path, empty_redis, redis_prefix))
