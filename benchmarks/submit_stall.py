"""How long a large submission holds the service: /health latency while a big workflow is
posted, and how soon a cancel of a run of thousands of tasks is answered.

    python benchmarks/submit_stall.py                 # this checkout
    python benchmarks/submit_stall.py --root DIR      # another checkout (e.g. main)

It starts a private redis-server and ``python -m simrun.cli service`` from ``--root``
(limits raised through SIMRUN_MAX_* so the documents are accepted; an older service ignores
those variables), then, for each scenario, polls /health every 20 ms from a thread while
the main thread posts, and prints the slowest /health answer and the post's own time.

Scenarios: ``big``: one task whose settings hold a list of --big-mib MiB (YAML, block
style); ``tasks``: --tasks one-unit tasks (JSON), then a cancel of that run, timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simrun.local.machine import free_port
from tests.support.redis_server import start_private_redis


class HealthProbe:
    """Polls /health every 20 ms in a thread; the slowest answer while it ran."""

    def __init__(self, url: str) -> None:
        self.url, self.worst, self.count, self.stop = url, 0.0, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with httpx.Client(timeout=600) as client:
            while not self.stop.is_set():
                start = time.perf_counter()
                client.get(f"{self.url}/health")
                self.worst = max(self.worst, time.perf_counter() - start)
                self.count += 1
                time.sleep(0.02)

    def __enter__(self) -> HealthProbe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def big_workflow(mib: float) -> str:
    lines = ["tasks:", "  - name: big", "    type: svc-work", "    settings:", "      pad:"]
    item = "        - abcdefghij"
    lines += [item] * int(mib * 2**20 / (len(item) + 1))
    return "\n".join(lines) + "\n"


def many_tasks(count: int) -> str:
    tasks = [{"name": f"t{i}", "type": "svc-work", "settings": {"units": 1}} for i in range(count)]
    return json.dumps({"tasks": tasks})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to serve")
    parser.add_argument("--big-mib", type=float, default=8.0)
    parser.add_argument("--tasks", type=int, default=8000)
    args = parser.parse_args()
    redis = start_private_redis()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": f"{args.root}{os.pathsep}{REPO}",
            "SIMRUN_MAX_WORKFLOW_BYTES": str(256 * 2**20),
            "SIMRUN_MAX_REQUEST_BYTES": str(512 * 2**20),
            "SIMRUN_MAX_TASKS": str(args.tasks + 1),
        }
        argv = [
            sys.executable, "-m", "simrun.cli", "service", "--port", str(port),
            "--redis-url", redis.url, "--store", tmp, "--plugins",
            "tests.support.service_tasks:WORK",
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=args.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{url}/health", timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            with httpx.Client(base_url=url, timeout=900) as client:
                text = big_workflow(args.big_mib)
                with HealthProbe(url) as probe:
                    start = time.perf_counter()
                    answer = client.post("/runs", json={"workflow": text, "reuse": False})
                    took = time.perf_counter() - start
                print(
                    f"big ({len(text) / 2**20:.1f} MiB): POST {answer.status_code} in "
                    f"{took:.2f} s; slowest /health {probe.worst * 1000:.0f} ms "
                    f"({probe.count} probes)"
                )
                text = many_tasks(args.tasks)
                with HealthProbe(url) as probe:
                    start = time.perf_counter()
                    answer = client.post("/runs", json={"workflow": text, "reuse": False})
                    took = time.perf_counter() - start
                    run_id = answer.json().get("run")
                    start = time.perf_counter()
                    cancel = client.post(f"/runs/{run_id}/cancel")
                    cancel_s = time.perf_counter() - start
                    time.sleep(2)
                print(
                    f"tasks ({args.tasks}, {len(text) / 2**20:.2f} MiB): POST "
                    f"{answer.status_code} in {took:.2f} s; cancel {cancel.status_code} in "
                    f"{cancel_s:.2f} s; slowest /health {probe.worst * 1000:.0f} ms "
                    f"({probe.count} probes)"
                )
        finally:
            proc.terminate()
            proc.wait(30)
            redis.stop()


if __name__ == "__main__":
    main()
