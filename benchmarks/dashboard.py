"""Load time of the web app's pages with a run of a million units in the store, against the
same pages of a run of ten units and the JSON the page's data comes from.

    python benchmarks/dashboard.py [--repeat 7] [--units 1000000] [--chromium PATH]

Everything runs on this machine: a private ``redis-server``, ``simrun service --token`` and
one ``simrun worker`` (2 processes) as child processes, a temporary store, and Debian's
Chromium driven by Playwright (``pip install -e '.[dev]'``; ``apt-get install chromium``).
Two runs of the tests' ``svc-work`` type are submitted and held back (their memory fits no
worker), so their units stay pending: ``big`` (``--units``) and ``small`` (10 units).

Each round loads, in one browser page that gave the token once, from ``about:blank``:

* ``#/runs`` until its table shows a row;
* ``#/runs/BIG`` and ``#/runs/SMALL`` until the run's progress bar shows;
* peers: ``GET /runs/BIG`` and ``GET /runs/SMALL`` (the run's JSON view, what ``simrun
  status`` asks) with httpx.

The cases are interleaved (one of each per round) so that the load of the shared machine
falls on all alike; each prints min / median / max, then the ratio of the million-unit run's
page to the ten-unit run's (1.0: the page's cost does not grow with the units), and the
bytes of data the page received from the service until it was ready (the page's own files,
about 0.5 MB, left out; event streams left out; no unit is sent before a task's strip is
opened); and the size of each run's JSON view, which the run page's event stream sends.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.latency import env, row, stop, wait_ready
from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis

WORK_REF = "tests.support.service_tasks:WORK"
PREFIX = "simrun-dashboard"
TOKEN = "dashboard-benchmark"


def held_run(name: str, units: int) -> str:
    """A workflow of one svc-work task of ``units`` units that no worker can take."""
    task = {
        "name": "big",
        "type": "svc-work",
        "settings": {"units": units},
        "resources": {"memory_per_worker_gb": 4000},
    }
    return json.dumps({"name": name, "tasks": [task]})


def submit(api: httpx.Client, name: str, units: int) -> str:
    """Submit a held run and wait until its task has counted its units; its id."""
    answer = api.post("/runs", json={"workflow": held_run(name, units)})
    answer.raise_for_status()
    run_id = str(answer.json()["run"])
    deadline = time.monotonic() + 120
    while not (api.get(f"/runs/{run_id}").json()["tasks"][0]["units"] or 0):
        if time.monotonic() > deadline:
            raise SystemExit(f"run {name} did not start")
        time.sleep(0.2)
    return run_id


def load(page: Any, url: str, ready: str, received: list[int]) -> tuple[float, int]:
    """Seconds from about:blank until ``ready`` shows at ``url``, and the bytes of the
    service's answers meanwhile."""
    page.goto("about:blank")
    received.clear()
    started = time.perf_counter()
    page.goto(url)
    page.locator(ready).first.wait_for(timeout=60_000)
    took = time.perf_counter() - started
    return took, sum(received)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds (>= 5 for the figures)")
    parser.add_argument("--units", type=int, default=1_000_000, help="units of the big run")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    exe = str(Path(sys.executable).parent / "simrun")
    redis = PrivateRedis()
    redis_url = redis.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="simrun-dashboard-") as tmp:
            home = Path(tmp)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            common = ["--redis-url", redis_url, "--prefix", PREFIX, "--store", str(home / "store")]
            logs = [open(home / name, "wb") for name in ("service.log", "worker.log")]  # noqa: SIM115
            procs.append(subprocess.Popen(
                [exe, "service", "--port", str(port), *common, "--plugins", WORK_REF,
                 "--token", TOKEN],
                cwd=REPO, env=env(), stdout=logs[0], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [exe, "worker", *common, "--plugins", WORK_REF, "--processes", "2"],
                cwd=REPO, env=env(), stdout=logs[1], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            headers = {"Authorization": f"Bearer {TOKEN}"}
            wait_ready(url, procs)
            with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
                big = submit(api, "big", args.units)
                small = submit(api, "small", 10)
                with sync_playwright() as p:
                    browser = p.chromium.launch(
                        executable_path=args.chromium, args=["--no-sandbox"]
                    )
                    context = browser.new_context(viewport={"width": 1280, "height": 800})
                    page = context.new_page()
                    received: list[int] = []

                    def answered(response: Any) -> None:
                        path = response.url[len(url) :].split("#")[0].split("?")[0]
                        if (
                            response.url.startswith(url)
                            and path not in ("", "/", "/favicon.ico")
                            and not path.startswith("/assets/")
                            and "text/event-stream"
                            not in (response.headers.get("content-type", ""))
                        ):
                            try:
                                received.append(len(response.body()))
                            except PlaywrightError:  # a body gone with its page (the next goto)
                                received.append(0)

                    page.on("response", answered)
                    page.goto(f"{url}/#/runs")
                    prompt = page.get_by_role("dialog", name="token")
                    prompt.get_by_label("token").fill(TOKEN)
                    prompt.get_by_role("button", name="Use token").click()
                    page.get_by_role("heading", name="Runs").wait_for()
                    pages = {
                        "page #/runs": (f"{url}/#/runs", "table.runs tbody tr"),
                        f"page of the {args.units:,}-unit run": (
                            f"{url}/#/runs/{big}",
                            "[aria-label='run progress']",
                        ),
                        "page of the 10-unit run": (
                            f"{url}/#/runs/{small}",
                            "[aria-label='run progress']",
                        ),
                    }
                    for target, ready in pages.values():  # an untimed round: warm caches
                        load(page, target, ready, received)
                    times: dict[str, list[float]] = {n: [] for n in pages}
                    sizes: dict[str, list[int]] = {n: [] for n in pages}
                    api_big, api_small = "GET /runs/BIG (JSON)", "GET /runs/SMALL (JSON)"
                    times[api_big], times[api_small] = [], []
                    for _ in range(args.repeat):
                        for name, (target, ready) in pages.items():
                            took, size = load(page, target, ready, received)
                            times[name].append(took)
                            sizes[name].append(size)
                        for name, run_id in ((api_big, big), (api_small, small)):
                            started = time.perf_counter()
                            api.get(f"/runs/{run_id}").raise_for_status()
                            times[name].append(time.perf_counter() - started)
                    browser.close()
                view_bytes = {
                    name: len(api.get(f"/runs/{run_id}").content)
                    for name, run_id in (("big", big), ("small", small))
                }
                api.post(f"/runs/{big}/cancel")
                api.post(f"/runs/{small}/cancel")
            print(f"dashboard load on this machine ({os.cpu_count()} CPUs, shared)")
            for name, values in times.items():
                print(row(name, values))
            med = statistics.median
            name_big = f"page of the {args.units:,}-unit run"
            name_small = "page of the 10-unit run"
            print(
                f"  {args.units:,}-unit run page / 10-unit run page: median "
                f"{med(times[name_big]) / med(times[name_small]):.2f}x, min "
                f"{min(times[name_big]) / min(times[name_small]):.2f}x"
            )
            for name in pages:
                print(
                    f"  bytes of data (not the page's own files) until ready, {name}: "
                    f"median {med(sizes[name]):,.0f}"
                )
            print(
                f"  the run's JSON view (what its event stream sends first): "
                f"{view_bytes['big']:,} bytes for {args.units:,} units, "
                f"{view_bytes['small']:,} for 10"
            )
            for log in logs:
                log.close()
    finally:
        for proc in reversed(procs):
            stop(proc)
        redis.stop()


if __name__ == "__main__":
    main()
