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
import logging
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from simrun.core.states import UnitRow
from simrun.local.machine import LocalError
from simrun.local.redis import PrivateRedis
from simrun.runstore.rows import RunRow
from simrun.worker.settings import WorkerSettings, worker_argv
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
OUTAGE_S = 5.0


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


def _start_worker(
    url: str, prefix: str, worker_id: str, log: Path, store: Path
) -> subprocess.Popen[bytes]:
    flags = WorkerSettings(
        queues=("cpu",), redis_url=url, prefix=prefix, memory_gb=2.0, processes=2,
        worker_id=worker_id, grace_s=2.0, plugins=tuple(REFS), python_path=(str(REPO),),
        poll_delay_s=0.01, heartbeat_s=HEARTBEAT_S, heartbeat_ttl_s=HEARTBEAT_TTL_S,
        store=store,
    )  # fmt: skip
    with log.open("wb") as out:
        return spawn(
            worker_argv(flags),
            None,
            stdout=subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,
        )


def _delivered(text: str) -> list[int]:
    """The reports a worker's log says it delivered when Redis came back, per outage."""
    return [int(n) for n, _ in _outages(text)]


def _outages(text: str) -> list[tuple[int, float]]:
    """(reports delivered, seconds away) of each outage a worker's log tells of."""
    found = re.findall(r"Redis is back after ([0-9.]+) s, delivered (\d+)", text)
    return [(int(n), float(s)) for s, n in found]


@dataclass
class Seen:
    """What happened around the outage."""

    run: RunRow
    units: list[UnitRow]
    calls: dict[int, int]
    delivered: list[list[int]]
    outages: list[list[tuple[int, float]]]
    down_s: float | None  # how long the service said Redis was away, before it came back
    readable: bool  # whether the API's reads answered while Redis was away
    exited: list[int | None]  # the workers' exit codes while Redis was away
    still: list[int | None]  # and after the run
    recovery_s: float
    logs: str


async def _ride_out(tmp_path: Path, server: PrivateRedis, prefix: str) -> Seen:
    """A run of ``UNITS`` units on two workers, Redis SIGKILLed mid-run for ``OUTAGE_S``
    and started again on its port; what happened."""
    url = server.url
    store = tmp_path / "store"
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    procs = [_start_worker(url, prefix, f"w{i}", log, store) for i, log in enumerate(logs)]
    try:
        async with service(store, url, prefix) as svc:

            async def both_up() -> bool:
                live = {w.id for w in await svc.controller.queue.live_workers()}
                return live == {"w0", "w1"}

            await svc.until(both_up, timeout_s=60)  # both hold work when Redis goes
            run_id = await svc.submit(work_doc(units=UNITS, seconds=0.25))
            rs = svc.controller.store

            async def some_done() -> bool:
                counts = await rs.counts(run_id)
                return "work" in counts and counts["work"].done >= 6

            await svc.until(some_done)
            server.kill()
            await asyncio.sleep(OUTAGE_S)
            down_s = svc.controller.redis_down_s()
            readable = await svc.controller.queries.run(run_id) is not None
            exited = [p.poll() for p in procs]
            server.start()
            back = time.monotonic()
            run = await svc.wait(run_id, timeout_s=120)
            recovery_s = time.monotonic() - back
            units = [u for u in await rs.units(run_id, "work") if u.kind == "chunk"]
            still = [p.poll() for p in procs]
    finally:
        for proc in procs:
            stop_worker(proc)
    out = store / "runs" / run_id / "work" / "out"
    print(f"run ended {recovery_s:.1f} s after Redis came back")  # the figure of the notes
    texts = [p.read_text() for p in logs]
    return Seen(
        run=run,
        units=units,
        calls=calls(out),
        delivered=[_delivered(t) for t in texts],
        outages=[_outages(t) for t in texts],
        down_s=down_s,
        readable=readable,
        exited=exited,
        still=still,
        recovery_s=recovery_s,
        logs="\n".join(f"--- {p.name}\n{t[-3000:]}" for p, t in zip(logs, texts, strict=True)),
    )


def _check(seen: Seen) -> None:
    logs = seen.logs
    assert seen.exited == [None, None], f"a worker exited while Redis was away\n{logs}"
    assert seen.still == [None, None], f"a worker exited after Redis came back\n{logs}"
    assert seen.run.state == "succeeded", f"{seen.run.message}\n{logs}"
    assert sorted(u.index for u in seen.units if u.state == "done") == list(range(UNITS))
    assert seen.calls == dict.fromkeys(range(UNITS), 1), f"a unit was computed twice\n{logs}"
    assert all(seen.delivered), f"a worker never saw Redis back\n{logs}"
    # One outage per worker; at most a blip after it (under 1 s, nothing to deliver): a
    # call that took a connection as the worker dropped those of the old server fails
    # once (a known imperfection of the reconnection, see the closing note of issue 12).
    for outages in seen.outages:
        assert all(n == 0 and away < 1.0 for n, away in outages[1:]), f"outages {outages}\n{logs}"
    assert sum(d[0] for d in seen.delivered) > 0, f"no report was kept and delivered\n{logs}"
    assert seen.down_s is not None, "the service did not notice that Redis was away"
    assert seen.readable, "the API could not read the run while Redis was away"


async def test_redis_restarted_with_its_data_is_ridden_out(
    tmp_path: Path,
    durable_redis: PrivateRedis,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis SIGKILLed mid-run and started again with its data (append-only file): both
    workers stay up and keep computing what they hold, the reports they kept reach the
    service once Redis is back, no worker is taken for dead, and every unit is computed
    exactly once."""
    caplog.set_level(logging.INFO, logger="simrun.service")
    _check(await _ride_out(tmp_path, durable_redis, redis_prefix))
    judged = [r.getMessage() for r in caplog.records if r.name == "simrun.service.liveness"]
    # (A job arq marked in progress just as Redis died, whose first read then failed, was
    # never run: liveness may give it up as abandoned; that computes nothing twice.)
    assert not [m for m in judged if "is gone" in m], judged


async def test_redis_restarted_empty_is_ridden_out(
    tmp_path: Path, empty_redis: PrivateRedis, redis_prefix: str
) -> None:
    """Redis SIGKILLed mid-run and started again empty (no persistence: queues, attempts,
    heartbeats and reports gone): both workers stay up, deliver the reports they kept, the
    service dispatches again only what was not done, and every unit is computed exactly
    once."""
    _check(await _ride_out(tmp_path, empty_redis, redis_prefix))
