"""Latency of a small run, whole processes: a 1-unit ``simrun submit --wait`` against the arq
client enqueuing one job and waiting for its result, and the command line's start-up.

    python benchmarks/latency.py [--repeat 7] [--simrun PATH]

Everything runs on this machine, on a private ``redis-server`` (`PrivateRedis`) started for
the benchmark and a temporary store:

* simrun: ``simrun service`` (its defaults) and one ``simrun worker`` (1 process, its
  defaults: a poll delay of 0.02 s) as child processes, up before the clock starts; the
  figure is the whole ``simrun submit lat.yaml --wait`` process (start-up, planning, the
  POST, following the run to its end, the summary) for a workflow of one ``test-noop``
  unit. Whether it followed the run by the event stream or fell back to polling is read
  from its stderr (the note it prints when it polls).
* peer: a raw arq worker process (``arq.worker.Worker``, one no-op function, the same poll
  delay as simrun's worker) on another queue of the same Redis; the figure is the whole
  process of an arq client that connects, enqueues one job and waits for its result
  (``job.result(poll_delay=0.01)``).
* start-up: ``simrun --help`` and ``simrun status --help``, with ``python -c pass`` as the
  floor.

The cases run interleaved (one of each per round, ``--repeat`` rounds) so that the load of
the shared machine falls on all of them alike; each prints min / median / max, then the
ratios of the medians and of the minimums. ``--simrun`` runs another installation's
console script (say, main's ``.venv/bin/simrun``) for a before/after figure: the service,
the worker and the submit all come from it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis
from simrun.worker.settings import DEFAULT_POLL_DELAY_S

NOOP_REF = "tests.support.tasks:NOOP"
PREFIX = "simrun-latency"
ARQ_QUEUE = "latency-arq"
WORKFLOW = (
    '{"name": "lat", "tasks": [{"name": "n", "type": "test-noop", "settings": {"units": 1}}]}\n'
)
#: The worker container's memory: room for its process at the default request (6 GiB: the
#: no-op type gives no hint); it is only what the container's admission counts.
MEMORY_GB = "12"

#: The raw arq worker: what a user of arq runs, with simrun's worker poll delay.
ARQ_WORKER = f"""
import asyncio
from arq.connections import RedisSettings
from arq.worker import Worker

async def noop(ctx):
    return None

worker = Worker(
    functions=[noop], queue_name={ARQ_QUEUE!r}, redis_settings=RedisSettings.from_dsn(URL),
    poll_delay={DEFAULT_POLL_DELAY_S}, handle_signals=True, log_results=False, keep_result=60,
)
worker.run()
"""

#: The arq client: connect, enqueue one job, wait for its result.
ARQ_CLIENT = f"""
import asyncio
from arq.connections import RedisSettings, create_pool

async def main():
    pool = await create_pool(RedisSettings.from_dsn(URL))
    job = await pool.enqueue_job("noop", _queue_name={ARQ_QUEUE!r})
    await job.result(timeout=30, poll_delay=0.01)
    await pool.aclose()

asyncio.run(main())
"""


def env() -> dict[str, str]:
    """The environment of the child processes: the repository on the path (the test task
    types), no simrun settings of the caller."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_") and k != "REDIS_URL"}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    out["COLUMNS"] = "120"
    return out


def timed(argv: Sequence[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Seconds of one whole process, and what it printed; fails when it fails."""
    start = time.perf_counter()
    done = subprocess.run(
        list(argv), cwd=cwd, env=env(), capture_output=True, text=True, timeout=120, check=False
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return took, done


def wait_ready(url: str, procs: Sequence[subprocess.Popen[bytes]], timeout_s: float = 60) -> None:
    """Until the service answers and one worker is live."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise SystemExit(f"{proc.args!r} exited ({proc.returncode})")
        try:
            if httpx.get(f"{url}/health", timeout=1).json().get("workers") == 1:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the service or the worker did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def row(name: str, values: Sequence[float]) -> str:
    return (
        f"  {name:<34} min {min(values):6.3f}  median {statistics.median(values):6.3f}  "
        f"max {max(values):6.3f} s  (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds (>= 5 for the figures)")
    parser.add_argument("--simrun", default=str(Path(sys.executable).parent / "simrun"))
    args = parser.parse_args()
    exe = args.simrun
    python = sys.executable
    redis = PrivateRedis()
    redis_url = redis.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="simrun-latency-") as tmp:
            home = Path(tmp)
            (home / "lat.yaml").write_text(WORKFLOW)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            common = ["--redis-url", redis_url, "--prefix", PREFIX, "--store", str(home / "store")]
            logs = [open(home / name, "wb") for name in ("service.log", "worker.log", "arq.log")]  # noqa: SIM115
            procs.append(subprocess.Popen(
                [exe, "service", "--port", str(port), *common, "--plugins", NOOP_REF],
                cwd=REPO, env=env(), stdout=logs[0], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [exe, "worker", *common, "--plugins", NOOP_REF, "--processes", "1",
                 "--worker-memory-gb", MEMORY_GB],
                cwd=REPO, env=env(), stdout=logs[1], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [python, "-c", f"URL = {redis_url!r}\n{ARQ_WORKER}"],
                cwd=home, env=env(), stdout=logs[2], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            wait_ready(url, procs)
            cases = {
                "arq client: enqueue 1, wait": [python, "-c", f"URL = {redis_url!r}\n{ARQ_CLIENT}"],
                "simrun submit --wait (1 unit)": [
                    exe, "submit", "lat.yaml", "--wait", "--no-reuse", "--url", url,
                    "--plugins", NOOP_REF,
                ],
                "simrun --help": [exe, "--help"],
                "simrun status --help": [exe, "status", "--help"],
                "python -c pass": [python, "-c", "pass"],
            }  # fmt: skip
            # one untimed round: the first run of each warms the caches (files, the store)
            for argv in cases.values():
                timed(argv, home)
            times: dict[str, list[float]] = {name: [] for name in cases}
            polled = 0
            for _ in range(args.repeat):
                for name, argv in cases.items():
                    took, done = timed(argv, home)
                    times[name].append(took)
                    if name.startswith("simrun submit") and "note:" in done.stderr:
                        polled += 1
            print(f"latency on this machine ({os.cpu_count()} CPUs, shared), {exe}")
            for name, values in times.items():
                print(row(name, values))
            submit = times["simrun submit --wait (1 unit)"]
            peer = times["arq client: enqueue 1, wait"]
            floor = times["python -c pass"]
            med = statistics.median
            print(
                f"  submit --wait / arq client: median {med(submit) / med(peer):.2f}x, "
                f"min {min(submit) / min(peer):.2f}x (target <= 2x)"
            )
            for name in ("simrun --help", "simrun status --help"):
                print(
                    f"  {name}: median {med(times[name]):.3f} s (target <= 0.25 s), "
                    f"{med(times[name]) - med(floor):.3f} s over python -c pass"
                )
            print(f"  submits that fell back to polling: {polled} of {len(submit)}")
            for log in logs:
                log.close()
    finally:
        for proc in reversed(procs):
            stop(proc)
        redis.stop()


if __name__ == "__main__":
    main()
