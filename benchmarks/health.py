"""Latency of ``GET /health`` under load: a real ``simrun service`` hammered by pollers of
other routes while runs are submitted.

    python benchmarks/health.py [--pollers 100] [--submits 20] [--simrun PATH]

Everything runs on this machine, on a private ``redis-server`` (`PrivateRedis`) and a
temporary store: ``simrun service`` and one ``simrun worker`` (1 process) as child
processes, up before the clock starts. Then, at once:

* the pollers: ``--pollers`` HTTP clients in one child process (its own event loop, so that
  their CPU is not this process's), each asking ``GET /runs`` and ``GET /workers`` in turn,
  as fast as the service answers;
* the submits: ``--submits`` runs of ``--units`` ``test-noop`` units posted one after the
  other (``POST /runs``), from a thread;
* the probe: ``GET /health`` every ``--every-s`` seconds from this process (its own
  connection), until the submits are done and at least ``--seconds`` passed.

It prints the probe's min / median / p95 / max (ms), how many probes took more than 1 s
(a Kubernetes readiness probe's default timeout), and how many requests the pollers made.
``--simrun`` runs another installation's console script (say, main's ``.venv/bin/simrun``)
for a before/after figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from simrun.core.reports import RunningJob, WorkerInfo
from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis
from simrun.queues.keys import Keys

NOOP_REF = "tests.support.tasks:NOOP"
PREFIX = "simrun-health"
#: The worker container's memory: room for its process at the default request.
MEMORY_GB = "12"
#: The routes the pollers ask, in turn (``--polled``).
POLLED = ("/runs", "/workers")


def workflow(units: int) -> str:
    return (
        '{"name": "health", "tasks": [{"name": "n", "type": "test-noop", '
        f'"settings": {{"units": {units}}}}}]}}\n'
    )


def fake_heartbeats(redis_url: str, count: int) -> None:
    """``count`` heartbeats of idle workers of another queue (they take no job), living a
    minute: the pool a big deployment's /health would read."""
    import redis

    keys = Keys(PREFIX)
    now = time.time()
    running: tuple[RunningJob, ...] = ()
    with redis.Redis.from_url(redis_url) as client:
        for i in range(count):
            info = WorkerInfo(
                id=f"fake-{i}", queues=("image:none",), memory_gb=64.0, processes=16, gpus=0,
                free_memory_gb=64.0, free_processes=16, running=running, host=f"h{i}", pid=i,
                started=now, updated=now,
            )  # fmt: skip
            client.set(keys.worker(info.id), info.to_json(), px=60_000)
            client.zadd(keys.workers, {info.id: now})


def env() -> dict[str, str]:
    """The environment of the child processes: the repository on the path (the test task
    types), no simrun settings of the caller."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_") and k != "REDIS_URL"}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


def wait_ready(url: str, procs: Sequence[subprocess.Popen[bytes]], timeout_s: float = 60) -> None:
    """Until the service answers and one worker is live (before the fake heartbeats)."""
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


async def _poll(
    client: httpx.AsyncClient, routes: Sequence[str], first: int, counts: list[int]
) -> None:
    turn = first
    while True:
        try:
            await client.get(routes[turn % len(routes)])
            counts[0] += 1
        except httpx.HTTPError:
            counts[1] += 1
        turn += 1


async def _pollers(url: str, pollers: int, routes: Sequence[str]) -> None:
    """``pollers`` clients asking ``routes`` in turn until this process is terminated; prints its
    counts every second (requests done, failed)."""
    counts = [0, 0]
    limits = httpx.Limits(max_connections=pollers, max_keepalive_connections=pollers)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        tasks = [asyncio.ensure_future(_poll(client, routes, i, counts)) for i in range(pollers)]
        while True:
            await asyncio.sleep(1.0)
            print(f"{counts[0]} {counts[1]}", flush=True)
            if all(t.done() for t in tasks):
                return


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def submit_all(url: str, submits: int, units: int, took: list[float]) -> None:
    """``submits`` runs posted one after the other; the seconds each POST took."""
    with httpx.Client(base_url=url, timeout=120) as client:
        for _ in range(submits):
            started = time.perf_counter()
            answer = client.post("/runs", json={"workflow": workflow(units)})
            took.append(time.perf_counter() - started)
            if answer.status_code != 201:
                raise SystemExit(f"POST /runs answered {answer.status_code}: {answer.text}")


def probe(url: str, until: threading.Event, min_s: float, every_s: float) -> list[float]:
    """``GET /health`` every ``every_s`` until ``until`` is set and ``min_s`` passed: the
    seconds each took (a failure counts as 60 s)."""
    out: list[float] = []
    start = time.monotonic()
    with httpx.Client(base_url=url, timeout=60) as client:
        while not until.is_set() or time.monotonic() - start < min_s:
            began = time.perf_counter()
            try:
                ok = client.get("/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            out.append(time.perf_counter() - began if ok else 60.0)
            time.sleep(every_s)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pollers", type=int, default=100, help="concurrent pollers")
    parser.add_argument("--submits", type=int, default=20, help="runs submitted")
    parser.add_argument("--units", type=int, default=50, help="units of each run")
    parser.add_argument("--seconds", type=float, default=15.0, help="least probing time")
    parser.add_argument(
        "--heartbeats", type=int, default=0, help="idle workers' heartbeats added (a big pool)"
    )
    parser.add_argument("--every-s", type=float, default=0.05, help="pause between probes")
    parser.add_argument(
        "--polled", default=",".join(POLLED), help="the routes the pollers ask, comma-separated"
    )
    parser.add_argument("--simrun", default=str(Path(sys.executable).parent / "simrun"))
    parser.add_argument("--pollers-of", metavar="URL", help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.pollers_of:
        asyncio.run(_pollers(args.pollers_of, args.pollers, args.polled.split(",")))
        return
    exe = args.simrun
    redis = PrivateRedis()
    redis_url = redis.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="simrun-health-") as tmp:
            home = Path(tmp)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            common = ["--redis-url", redis_url, "--prefix", PREFIX, "--store", str(home / "store")]
            logs = [open(home / name, "wb") for name in ("service.log", "worker.log")]  # noqa: SIM115  # closed at the end
            procs.append(subprocess.Popen(
                [exe, "service", "--port", str(port), *common, "--plugins", NOOP_REF],
                cwd=REPO, env=env(), stdout=logs[0], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [exe, "worker", *common, "--plugins", NOOP_REF, "--processes", "1",
                 "--worker-memory-gb", MEMORY_GB],
                cwd=REPO, env=env(), stdout=logs[1], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            wait_ready(url, procs)
            fake_heartbeats(redis_url, args.heartbeats)
            pollers = subprocess.Popen(
                [sys.executable, __file__, "--pollers", str(args.pollers), "--polled",
                 args.polled, "--pollers-of", url],
                cwd=REPO, env=env(), stdout=subprocess.PIPE,
            )  # fmt: skip
            procs.append(pollers)
            time.sleep(1.0)  # the pollers connect before the clock starts
            posts: list[float] = []
            done = threading.Event()

            def submits() -> None:
                try:
                    submit_all(url, args.submits, args.units, posts)
                finally:
                    done.set()

            thread = threading.Thread(target=submits, daemon=True)
            thread.start()
            latencies = probe(url, done, args.seconds, args.every_s)
            thread.join()
            stop(pollers)
            assert pollers.stdout is not None
            lines = pollers.stdout.read().decode().split()
            requests, failed = (int(lines[-2]), int(lines[-1])) if len(lines) >= 2 else (0, 0)
            ms = [s * 1000 for s in latencies]
            print(
                f"/health under load on this machine ({os.cpu_count()} CPUs, shared), {exe}:\n"
                f"  {args.pollers} pollers of {args.polled}, {args.submits} submits "
                f"of {args.units} units, {args.heartbeats} more heartbeats\n"
                f"  /health: n={len(ms)}  min {min(ms):.1f}  median {statistics.median(ms):.1f}  "
                f"p95 {percentile(ms, 0.95):.1f}  max {max(ms):.1f} ms; "
                f"over 1 s: {sum(1 for v in ms if v > 1000)}\n"
                f"  POST /runs: median {statistics.median(posts):.2f}  max {max(posts):.2f} s\n"
                f"  pollers: {requests} requests answered, {failed} failed"
            )
            for log in logs:
                log.close()
    finally:
        for proc in reversed(procs):
            stop(proc)
        redis.stop()


if __name__ == "__main__":
    main()
