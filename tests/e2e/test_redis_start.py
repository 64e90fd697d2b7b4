"""Redis that is not there yet when the worker containers and the service start, and Redis
that stops answering without closing its connections (a frozen server): both are waited
out, with no restart of any process, and the run finishes with every unit computed once.

Real parts throughout (tests/support/campaign.py): a private redis-server of the test on a
port chosen before it starts, the service as a child process (the controller loop and the
HTTP API), worker containers as child processes (``python -m simrun.cli worker``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis
from simrun.worker.health import judge_local, local_statuses
from tests.support import REPO
from tests.support.campaign import Campaign, fault_doc, report
from tests.support.cli_harness import simrun

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("redis-start")]

UNITS = 16
#: The Redis timeout of the stalled-Redis test's processes: a call to a frozen Redis fails
#: after this long.
TIMEOUT_S = 1.0
#: How long Redis stays frozen: well past the bound in which it must be noticed (the
#: timeout, after the next call: the workers poll every 10 ms, the service every 20 ms).
STALL_S = 8.0
DETECT_BOUND_S = 5.0


@pytest.fixture
def campaign(tmp_path: Path) -> Iterator[Campaign]:
    c = Campaign(tmp_path)
    try:
        yield c
    finally:
        if c.redis.proc is not None and c.redis.proc.poll() is None:
            os.kill(c.redis.proc.pid, signal.SIGCONT)
        c.close()


def _lines(path: Path, text: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if text in line]


def _worker_health(c: Campaign, worker_id: str, local: Path) -> subprocess.CompletedProcess[str]:
    """The worker's container health check, as a probe runs it."""
    argv = [sys.executable, "-m", "simrun.worker.health", "--redis-url", c.redis.url,
            "--prefix", c.prefix, "--id", worker_id, "--local-dir", str(local),
            "--timeout-s", "1"]  # fmt: skip
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=30)


def _waiting(c: Campaign, local: Path, worker_id: str) -> bool:
    """Whether a worker's status file says it waits for Redis (what its health check reads
    first)."""
    verdict = judge_local(local_statuses(local, worker_id), now=time.time(), prefix=c.prefix)
    return verdict is not None and "waiting for Redis" in verdict.message


def _tried_for(c: Campaign, local: Path, seconds: float) -> bool:
    """Whether the service and every worker have been trying Redis for ``seconds`` (its
    /health "unreachable for N s"; the ``down_s`` each worker's status file has at a try):
    several tries each, the pause between two doubling from 0.1 s."""
    found = re.search(r"unreachable for (\d+) s", str((c.health() or {}).get("redis")))
    workers = [
        max((float(s.get("down_s") or 0) for s in local_statuses(local, w)), default=0.0)
        for w in c.workers
    ]
    return found is not None and int(found.group(1)) >= seconds and min(workers) >= seconds


def test_workers_and_service_started_before_redis_wait_for_it(
    campaign: Campaign, tmp_path: Path
) -> None:
    """A worker and the service started while nothing listens on Redis's port wait for it
    (one "waiting for Redis" line each, not one per try; the worker's health check says
    "waiting for Redis", the service's /health "degraded" while its API reads SQLite); once
    redis-server starts on that port they connect (one "connected ... after N s" line) and
    a run completes with every unit computed once, no process restarted."""
    c = campaign
    local = tmp_path / "worker-local"
    c.start_service(healthy=False)
    for i in range(2):
        c.start_worker(f"w{i}", local_dir=local)
    health = c.wait("/health to say degraded", c.health)
    c.wait("/health to say degraded", lambda: (c.health() or {}).get("status") == "degraded")
    assert health["ok"] is False, health
    assert c.http.get("/runs").status_code == 200  # reads from SQLite meanwhile
    c.wait("both workers to say they wait", lambda: all(_waiting(c, local, w) for w in c.workers))
    probe = _worker_health(c, "w0", local)
    assert probe.returncode == 0, probe
    assert "waiting for Redis" in probe.stdout, probe
    c.wait("several tries of each (logged as one line)", lambda: _tried_for(c, local, 2))
    c.check()

    c.redis.start()
    started = time.monotonic()
    c.wait_workers(2, timeout_s=60)
    connected_s = time.monotonic() - started
    run_id = c.submit(fault_doc(UNITS, seconds=0.1))
    state, message = c.wait_run(run_id, timeout_s=120)
    assert (state, message) == ("succeeded", ""), message
    c.assert_every_unit_once(run_id, UNITS)
    c.check()  # no worker and not the service ended meanwhile

    service_log = c.logs / "service.log"
    assert len(_lines(service_log, "waiting for Redis at")) == 1, service_log.read_text()
    assert len(_lines(service_log, "connected to Redis at")) == 1, service_log.read_text()
    for worker in c.workers.values():
        assert len(_lines(worker.log, "waiting for Redis at")) == 1, worker.log.read_text()
        assert len(_lines(worker.log, "connected to Redis at")) == 1, worker.log.read_text()
        assert not _lines(worker.log, "retries remaining"), worker.log.read_text()
    assert not list(local.glob("*.status.json")), "a status file stayed after connecting"
    report("redis-late", connected_s, UNITS)


def test_a_frozen_redis_is_noticed_and_ridden_out(campaign: Campaign, tmp_path: Path) -> None:
    """redis-server SIGSTOPped mid-run (connections open, nothing answered) for longer than
    the detection bound: the service notices within the bound (/health "degraded") and so
    do the workers (their health check: "waiting for Redis"); after SIGCONT the run
    finishes with no process restarted and every unit computed exactly once."""
    c = campaign
    local = tmp_path / "worker-local"
    c.redis.start()
    c.start_service(redis_timeout_s=TIMEOUT_S)
    for i in range(2):
        c.start_worker(f"w{i}", local_dir=local, redis_timeout_s=TIMEOUT_S)
    c.wait_workers(2)
    run_id = c.submit(fault_doc(UNITS * 3, seconds=0.15))
    c.wait("some units done", lambda: len(c.done(run_id)) >= 6, timeout_s=60)

    assert c.redis.proc is not None
    os.kill(c.redis.proc.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    seen: dict[str, float] = {}
    while time.monotonic() - frozen < STALL_S:
        now = time.monotonic() - frozen
        if "service" not in seen and (c.health() or {}).get("status") == "degraded":
            seen["service"] = now
        for w in c.workers:
            if w not in seen and _waiting(c, local, w):
                seen[w] = now
        c.check()
        time.sleep(0.1)
    probe = _worker_health(c, "w0", local)
    os.kill(c.redis.proc.pid, signal.SIGCONT)
    thawed = time.monotonic()
    assert probe.returncode == 0, probe
    assert "waiting for Redis" in probe.stdout, probe
    assert set(seen) == {"service", "w0", "w1"}, f"not noticed by all: {seen}"
    assert max(seen.values()) <= DETECT_BOUND_S, seen

    state, message = c.wait_run(run_id, timeout_s=120)
    recovery_s = time.monotonic() - thawed
    assert (state, message) == ("succeeded", ""), message
    c.assert_every_unit_once(run_id, UNITS * 3)
    c.check()
    service_log = c.logs / "service.log"
    assert len(_lines(service_log, "lost Redis at")) == 1, service_log.read_text()
    for worker in c.workers.values():  # one line per change of state, not one per try
        assert len(_lines(worker.log, "lost Redis at")) == 1, worker.log.read_text()
        assert len(_lines(worker.log, "Redis is back after")) == 1, worker.log.read_text()
    report(
        "redis-frozen",
        recovery_s,
        UNITS * 3,
        service_noticed_s=seen["service"],
        worker_noticed_s=max(seen["w0"], seen["w1"]),
    )


def _wrong_password(url: str) -> str:
    return url.replace("redis://", "redis://:not-the-password@", 1)


@pytest.mark.parametrize("command", ["worker", "service"])
def test_a_redis_that_refuses_the_credentials_fails_at_once(
    command: str, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """A Redis that answers but refuses the credentials of the URL will never take the
    worker or the service: the command fails at once with one line naming the Redis (its
    password hidden) and why, rather than waiting (or retrying) for ever."""
    url = _wrong_password(private_redis.url)
    args = {
        "worker": ["worker", "--processes", "1", "--worker-memory-gb", "1", "--cgroups", "off",
                   "--local-dir", str(tmp_path / "local")],
        "service": ["service", "--store", str(tmp_path / "store"), "--port", str(free_port())],
    }[command]  # fmt: skip
    started = time.monotonic()
    done = simrun(*args, "--redis-url", url, cwd=tmp_path, timeout=60)
    took = time.monotonic() - started
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert done.returncode == 1, done.stderr
    assert len(errors) == 1, done.stderr
    assert "cannot be used" in errors[0], errors
    assert "not-the-password" not in done.stderr
    assert "***@127.0.0.1" in errors[0], errors
    assert "waiting for Redis" not in done.stderr
    assert "retries remaining" not in done.stderr
    assert "bug of simrun" not in done.stderr
    print(f"{command} refused by Redis failed after {took:.1f} s")
