"""The service and a CPU worker started with exactly the commands and environment that
docker-compose.yml gives ``service`` and ``worker-cpu``: the README's
``simrun submit examples/heat.yaml --wait`` runs to success through them, /metrics answers
with the token and the worker shape of the compose file, and the worker's compose health
check passes.

Only what must differ outside the containers is replaced: Redis's address (REDIS_URL), the
store's path (SIMRUN_STORE), the address the service listens on (a free port on
127.0.0.1, which is where compose publishes it), and a Redis key prefix of this test
(``--prefix``, given to the service, the worker and the health check). The compose file is
resolved with a token and a worker shape other than the defaults, so that a flag the
service ignored would show."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simrun.local.machine import free_port
from tests.composefile import compose, seconds, services
from tests.support import REPO
from tests.support.cli_harness import (
    clean_env,
    run_id_in,
    start_simrun,
    wait_for_service,
    wait_for_workers,
)

pytestmark = pytest.mark.e2e

#: What .env would set: a token, and a worker shape unlike the defaults (8 GiB, 4).
ENV = {"SIMRUN_TOKEN": "tok3n4tests", "WORKER_CPU_MEMORY_GB": "6", "WORKER_CPU_PROCESSES": "3"}


def _replace(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with the value after ``flag`` replaced (the flag must be there once)."""
    assert argv.count(flag) == 1, (flag, argv)
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def _environment(spec: dict[str, Any], redis_url: str, store: Path) -> dict[str, str]:
    """The container's environment from the compose file, over a user's clean one, with
    Redis's address and the store's path replaced."""
    env = {**clean_env(), **spec["environment"]}
    env["REDIS_URL"] = redis_url
    env["SIMRUN_STORE"] = str(store)
    # the container's own local paths (the database's volume, the scratch volume) are
    # directories of this test outside a container
    for name, local in (("SIMRUN_DB", "db/simrun.db"), ("SIMRUN_SCRATCH_DIR", "scratch")):
        if name in env:
            env[name] = str(store.parent / f"{store.name}-{local}")
            Path(env[name]).parent.mkdir(parents=True, exist_ok=True)
    return env


def _health(spec: dict[str, Any], env: dict[str, str], prefix: str) -> subprocess.Popen[str]:
    """A worker's compose health check (``CMD`` form) run in its environment."""
    command = spec["healthcheck"]["test"]
    assert command[0] == "CMD"
    argv = [sys.executable if command[1] == "python" else command[1], *command[2:]]
    return subprocess.Popen(
        [*argv, "--prefix", prefix],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(proc: subprocess.Popen[str], timeout_s: float) -> tuple[int | None, str]:
    """SIGTERM (what ``docker compose stop`` sends), then SIGKILL after ``timeout_s``; the
    exit status (None when it had to be killed) and the output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        return None, output


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a /metrics answer, parsed by the Prometheus client's parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture
def stack_processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts, stopped at its end whatever happened."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_compose_service_and_worker_run_the_readme_submit(
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
    stack_processes: list[subprocess.Popen[str]],
) -> None:
    """With the compose file's own service and worker-cpu commands and environment, the
    service answers /health, keeps /metrics behind the token and reports there the worker
    shape of the compose file while no worker is live; the worker joins;
    ``simrun submit examples/heat.yaml --wait`` with the compose token runs to success;
    the worker's health check passes meanwhile; on SIGTERM both exit 0 within their
    stop_grace_period, the service after closing its controller. The service says at
    start the heartbeat lifetime and worker shape the compose command gave it."""
    doc = services(compose(**ENV))
    store = tmp_path / "store"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {ENV['SIMRUN_TOKEN']}"}

    service_spec = doc["service"]
    assert service_spec["entrypoint"] == ["tini", "--", "simrun", "service"]
    assert set(service_spec["environment"]) == {
        "REDIS_URL",
        "SIMRUN_STORE",
        "SIMRUN_TOKEN",
        "SIMRUN_DB",
        "SIMRUN_SCRATCH_DIR",
    }
    service_env = _environment(service_spec, redis_url, store)
    assert service_env["SIMRUN_TOKEN"] == ENV["SIMRUN_TOKEN"]
    command = _replace(
        _replace(service_spec["command"], "--host", "127.0.0.1"), "--port", str(port)
    )
    # The image's entry point without tini (PID 1's signal forwarding, not simrun's).
    service = start_simrun(
        "service", *command, "--prefix", redis_prefix, cwd=tmp_path, env=service_env
    )
    stack_processes.append(service)

    assert wait_for_service(url, service, timeout_s=30)["workers"] == 0

    assert httpx.get(f"{url}/metrics", timeout=5).status_code == 401
    answer = httpx.get(f"{url}/metrics", headers=auth, timeout=5)
    assert answer.status_code == 200, answer.text
    samples = _metrics(answer.text)
    cpu = (("queue", "cpu"),)
    assert samples[("simrun_workers", cpu)] == 0
    assert samples[("simrun_desired_workers_processes", cpu)] == 3
    assert samples[("simrun_desired_workers_memory_gib", cpu)] == 6

    worker_spec = doc["worker-cpu"]
    assert set(worker_spec["environment"]) == {"REDIS_URL", "SIMRUN_STORE", "SIMRUN_SCRATCH_DIR"}
    worker_env = _environment(worker_spec, redis_url, store)
    worker = start_simrun(
        "worker", *worker_spec["command"], "--prefix", redis_prefix, cwd=tmp_path, env=worker_env
    )
    stack_processes.append(worker)
    wait_for_workers(url, [worker], workers=1, timeout_s=30)

    client_env = clean_env(SIMRUN_TOKEN=service_env["SIMRUN_TOKEN"])
    submit = start_simrun(
        "submit", "examples/heat.yaml", "--url", url, "--wait", cwd=REPO, env=client_env
    )
    stack_processes.append(submit)
    check = _health(worker_spec, worker_env, redis_prefix)
    stack_processes.append(check)
    checked, _ = check.communicate(timeout=60)
    submitted, _ = submit.communicate(timeout=180)

    assert check.returncode == 0, checked
    assert checked.startswith("ok: worker ")
    assert "queues cpu" in checked
    assert "/3 processes busy" in checked

    assert submit.returncode == 0, submitted
    run_id = run_id_in(submitted)
    assert f"run {run_id} succeeded" in submitted
    view = httpx.get(f"{url}/runs/{run_id}", headers=auth, timeout=5).json()
    assert view["state"] == "succeeded"
    tasks = {t["name"]: t for t in view["tasks"]}
    assert tasks["sweep"]["counts"]["done"] == 24
    assert tasks["summary"]["state"] == "done"
    assert (store / "runs" / run_id / "summary" / "out" / "report.md").is_file()

    for proc, spec in ((worker, worker_spec), (service, service_spec)):
        grace_s = seconds(spec["stop_grace_period"])
        started = time.monotonic()
        status, output = _stop(proc, grace_s)
        assert status == 0, output
        assert time.monotonic() - started < grace_s
    assert "simrun service stopped" in output, output  # the controller was closed
    # The compose file's --heartbeat-ttl-s reached the controller.
    ttl_s = float(service_spec["command"][service_spec["command"].index("--heartbeat-ttl-s") + 1])
    assert f"heartbeats live {ttl_s:g} s; worker containers of 3 processes, 6 GiB" in output
    # the database on the service's own volume (SIMRUN_DB), not in the shared store
    assert os.path.exists(service_env["SIMRUN_DB"])
    assert not os.path.exists(store / "simrun.db")
