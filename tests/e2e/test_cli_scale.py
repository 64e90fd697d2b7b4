"""`simrun scale` as a user runs it: the real command (``python -m simrun.cli.scale``, the
module behind ``simrun scale``) as a child process against a real `simrun service` child
process on a free port, with the tests' private Redis and a key prefix of its own, and a
token. No worker runs: the submitted run's units stay queued or pending, which is the
backlog the command reads. Nothing is applied: ``--dry-run`` prints the commands.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from simrun.local.machine import free_port
from tests.support.cli_harness import (
    WORK,
    Output,
    clean_env,
    ended,
    health,
    start_simrun,
    stop_process,
)
from tests.support.redis_server import key_prefix
from tests.support.wait import wait_until

#: The tests share one service (a module fixture): in one pytest-xdist worker (--dist
#: loadgroup) it starts once.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cli-scale")]

TOKEN = "scale-token"
UNITS = 40
#: svc-work units learned nothing: 40 x 60 s (the default) of work.
WORK_DOC = f"""\
name: scale
tasks:
  - name: work
    type: svc-work
    settings:
      units: {UNITS}
      seconds: 0.01
      tag: scale
"""


@dataclass(frozen=True)
class Service:
    url: str
    home: Path

    def scale(self, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
        """``python -m simrun.cli.scale --url URL ARGS`` with SIMRUN_TOKEN (when given)."""
        env = clean_env(**({"SIMRUN_TOKEN": token} if token else {}))
        return subprocess.run(
            [sys.executable, "-m", "simrun.cli.scale", "--url", self.url, *args],
            cwd=self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    """`simrun service` with a token and a run of 40 units submitted, once its backlog
    shows them."""
    home = tmp_path_factory.mktemp("scale")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    svc = start_simrun(
        "service", "--port", str(port), "--redis-url", redis_url,
        "--prefix", key_prefix("scale"), "--store", str(home / "store"),
        "--plugins", WORK,
        cwd=home, env=clean_env(SIMRUN_TOKEN=TOKEN),
    )  # fmt: skip
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        wait_until(
            lambda: (health(url) or {}).get("ok"),
            timeout_s=30,
            what="the service to start",
            check=ended(svc),
        )
        answer = httpx.post(f"{url}/runs", json={"workflow": WORK_DOC}, headers=auth, timeout=10)
        assert answer.status_code == 201, answer.text
        wait_until(
            lambda: httpx.get(f"{url}/backlog", headers=auth).json()["queues"][0]["units"] >= UNITS,
            timeout_s=30,
            what="the run's units in /backlog",
        )
        yield Service(url, home)
    finally:
        stop_process(svc)


def _row(stdout: str, queue: str) -> list[str]:
    for line in stdout.splitlines():
        if line.split()[:1] == [queue]:
            return line.split()
    raise AssertionError(f"no row of queue {queue!r}:\n{stdout}")


def test_dry_run_prints_the_table_and_the_compose_command(service: Service) -> None:
    """With no live worker the service's default shape (4 processes, 8 GiB) is used: 40 units of the
    default 60 s drain in 2 minutes on 40 x 60 / 120 / 4 = 5 containers. The table shows
    the queue, its units, work, live workers, shape and decision, the reason follows, and
    --dry-run prints the compose command (with the compose file) instead of running it."""
    done = service.scale(
        "--target-minutes", "2", "--apply", "compose", "--compose-file", "docker-compose.yml",
        "--dry-run",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert _row(done.stdout, "queue") == ["queue", "units", "work", "workers", "container",
                                          "desired"]  # fmt: skip
    assert _row(done.stdout, "cpu") == ["cpu", "40", "40.0", "min", "0", "4", "x", "8", "GiB",
                                        "(service", "default)", "5"]  # fmt: skip
    assert "cpu: 40 units, 40.0 min of work (40 at the default 60 s per unit)" in done.stdout
    assert (
        "would run: docker compose -f docker-compose.yml up -d --scale worker-cpu=5 --no-recreate"
        in done.stdout
    )


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (
            ["--apply", "kubernetes"],
            "kubectl scale deployment/simrun-worker-cpu --replicas=1",
        ),
        (
            ["--apply", "kubernetes", "--target-minutes", "1", "--max", "3"],
            "kubectl scale deployment/simrun-worker-cpu --replicas=3",
        ),
        (
            ["--apply", "kubernetes", "--min", "7", "--deployment", "workers"],
            "kubectl scale deployment/workers --replicas=7",
        ),
        (
            ["--apply", "compose", "--queue", "cpu", "--queue", "gpu", "--processes", "2"],
            "docker compose --profile gpu up -d --scale worker-cpu=2 --scale worker-gpu=0 "
            "--no-recreate",
        ),
    ],
)
def test_dry_run_commands_follow_the_options(
    service: Service, args: list[str], command: str
) -> None:
    """The decision follows --target-minutes, --min/--max and --processes (the default 10
    minutes: 1 container; 1 minute: 10, capped at --max 3; --min 7 raises it; 2 processes:
    2), and the command names the Deployment, or the compose services with the gpu
    profile (a queue without backlog gets the minimum)."""
    done = service.scale(*args, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"would run: {command}" in done.stdout


def test_errors_are_one_line(service: Service, tmp_path: Path) -> None:
    """A wrong token, a service that is not there, and a queue compose has no service for
    (neither cpu, gpu nor an image's) each end with status 1 and one line on stderr, no
    traceback."""
    wrong = service.scale(token="nope")
    gone = subprocess.run(
        [sys.executable, "-m", "simrun.cli.scale", "--url", f"http://127.0.0.1:{free_port()}"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    image = service.scale("--apply", "compose", "--queue", "tpu", "--dry-run")
    for done, words in [
        (wrong, "401"),
        (gone, "cannot reach the simrun service"),
        (image, "has no docker compose service"),
    ]:
        assert done.returncode == 1, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert words in done.stderr
        assert "Traceback" not in done.stderr


def test_an_image_queue_scales_its_workers_service(service: Service) -> None:
    """`--image NAME` (or `--queue image:…`) applies the decision to the compose service
    worker-image-<name>; the queue's name is printed as it is (no emoji made of it)."""
    done = service.scale("--apply", "compose", "--image", "x", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would run: docker compose up -d --scale worker-image-x=0 --no-recreate" in done.stdout
    assert "image:x: empty backlog" in done.stdout


def test_watch_repeats_until_interrupted(service: Service) -> None:
    """--watch decides again every SECONDS (the table comes once per round) and Ctrl-C
    ends it quietly with status 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simrun.cli.scale", "--url", service.url, "--watch", "1"],
        cwd=service.home,
        env=clean_env(SIMRUN_TOKEN=TOKEN),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = Output(proc)
    try:
        output.wait_for(lambda text: text.count("desired") >= 2)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        stdout = output.text()
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        stop_process(proc)
    assert proc.returncode == 0, stdout + stderr
    assert stdout.count("desired") >= 2, stdout
    assert "Traceback" not in stderr
