"""Following a run by push, as a user runs it: the real ``simrun`` console script against a
real ``simrun service`` and ``simrun worker`` (child processes, a real Redis). The service's
access log tells which requests the command made."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from simrun.local.machine import free_port
from tests.support.cli_harness import (
    WORK,
    Output,
    run_id_in,
    simrun,
    start_simrun,
    stop_process,
    wait_for_workers,
    write_work,
)
from tests.support.redis_server import key_prefix

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cli-follow")]


@dataclass(frozen=True)
class Service:
    url: str
    home: Path
    log: Output

    def requests(self, run_id: str) -> list[str]:
        """The requests of ``run_id`` in the service's access log ("GET /runs/ID/events")."""
        return re.findall(rf'"([A-Z]+ /runs/{run_id}[^ "]*)', self.log.text(timeout_s=0))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    """`simrun service` (its access log read as it comes) and one `simrun worker`."""
    home = tmp_path_factory.mktemp("follow")
    port = free_port()
    common = ["--redis-url", redis_url, "--prefix", key_prefix("follow"), "--store",
              str(home / "store"), "--plugins", WORK]  # fmt: skip
    svc = start_simrun("service", "--port", str(port), *common, cwd=home)
    log = Output(svc)
    worker = start_simrun("worker", *common, "--processes", "1", "--worker-memory-gb", "2",
                          "--poll-delay-s", "0.01", cwd=home)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def running() -> None:
        assert svc.poll() is None, log.text(timeout_s=1)
        assert worker.poll() is None

    try:
        wait_for_workers(url, [], workers=1, timeout_s=30, check=running)
        yield Service(url, home, log)
    finally:
        stop_process(worker)
        stop_process(svc)


def test_submit_wait_follows_the_run_by_its_event_stream(service: Service) -> None:
    """`submit --wait` returns with the run's final state, having followed it by
    ``GET /runs/ID/events`` alone: it never asked ``GET /runs/ID`` (polling) and printed no
    note of a fallback."""
    write_work(service.home / "one.yaml", units=1, seconds=0.01, tag="one")
    done = simrun("submit", "one.yaml", "--wait", "--plugins", WORK, "--url", service.url,
                  cwd=service.home)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = run_id_in(done.stdout)
    assert f"run {run_id} succeeded" in done.stdout
    assert "note:" not in done.stderr
    service.log.wait_for(lambda text: f"/runs/{run_id}/failures" in text, timeout_s=10)
    asked = service.requests(run_id)
    assert f"GET /runs/{run_id}/events" in asked
    assert f"GET /runs/{run_id}" not in asked


def test_status_watch_follows_a_running_run_to_its_end(service: Service) -> None:
    """`status RUN --watch` on a run that is still going follows it by its event stream to
    its end and exits 0 (no polling)."""
    write_work(service.home / "slow.yaml", units=3, seconds=0.5, tag="slow")
    submitted = simrun("submit", "slow.yaml", "--plugins", WORK, "--url", service.url,
                       cwd=service.home)  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = run_id_in(submitted.stdout)
    watched = simrun("status", run_id, "--watch", "--url", service.url, cwd=service.home)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert f"run {run_id} succeeded" in watched.stdout
    assert "note:" not in watched.stderr
    service.log.wait_for(lambda text: f"/runs/{run_id}/failures" in text, timeout_s=10)
    asked = service.requests(run_id)
    assert f"GET /runs/{run_id}/events" in asked
    assert f"GET /runs/{run_id}" not in asked
