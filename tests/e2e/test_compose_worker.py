"""A worker started with exactly the command, environment and health check that
docker-compose.yml gives ``worker-cpu``: it joins Redis, runs units of the example ``heat``
type, counts as healthy, and stops on SIGTERM within the compose stop grace period."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simrun.core.layout import StoreLayout
from simrun.core.signing import store_key
from simrun.queues.client import JobQueue
from tests.composefile import compose, seconds, services
from tests.support import REPO
from tests.support.cli_harness import ended
from tests.support.harness import RUN, all_reports, make_spec
from tests.support.wait import until

pytestmark = pytest.mark.e2e

HEAT = {"grid": 16, "diffusivities": [0.1, 0.3], "boundary_temperatures": [0, 10], "duration": 0.05}


def _health(
    command: list[str], env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """The compose health check's command (``CMD`` form), run in the worker's environment."""
    assert command[0] == "CMD"
    argv = [sys.executable if command[1] == "python" else command[1], *command[2:], *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def _start(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


async def test_compose_worker_runs_units_is_healthy_and_stops(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """The worker-cpu command and environment of docker-compose.yml, with only what must
    differ outside a container (Redis's address, the store's path, and a key prefix of this
    test), make a worker that runs queued units, passes the compose health check, and on
    SIGTERM exits 0 within stop_grace_period, after which the health check fails."""
    spec = services(compose())["worker-cpu"]
    env = {**os.environ, **spec["environment"]}
    assert set(spec["environment"]) == {"REDIS_URL", "SIMRUN_STORE", "SIMRUN_SCRATCH_DIR"}
    env["REDIS_URL"] = redis_url
    env["SIMRUN_STORE"] = str(tmp_path)
    env["SIMRUN_SCRATCH_DIR"] = str(tmp_path / "local-scratch")  # the container's volume
    prefix = ["--prefix", redis_prefix]
    proc = _start(
        [sys.executable, "-m", "simrun.cli", "worker", *spec["command"], *prefix], env, tmp_path
    )
    # the service of the stack signs with the key the shared store holds (made by either)
    queue = await JobQueue.connect(
        redis_url, redis_prefix, key=store_key(StoreLayout(tmp_path).job_key)
    )
    plate = tmp_path / "runs" / RUN / "sources" / "plate.json"  # a worker reads its store only
    plate.parent.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "plate.json", plate)
    try:
        job = make_spec(tmp_path, "sweep", "heat", [0, 1, 2, 3], HEAT, inputs={"plate": plate})
        assert await queue.enqueue(job)
        reports = {}

        async def reported() -> bool:
            reports.update(await all_reports(queue))
            return job.job_id in reports

        await until(reported, timeout_s=60, what="the job's report", check=ended(proc), poll_s=0.1)
        entry = reports[job.job_id]
        assert entry.outcomes == {0: "done", 1: "done", 2: "done", 3: "done"}, entry.errors

        check = _health(spec["healthcheck"]["test"], env, *prefix)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stdout.startswith("ok: worker ")
        assert "queues cpu" in check.stdout

        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=seconds(spec["stop_grace_period"]))
        assert proc.returncode == 0, output.decode()
        assert time.monotonic() - started < seconds(spec["stop_grace_period"])

        check = _health(spec["healthcheck"]["test"], env, *prefix)
        assert check.returncode == 1
        assert "no heartbeat" in check.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        await queue.close()
