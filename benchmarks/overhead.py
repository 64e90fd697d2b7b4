"""Scheduling overhead of CPU-busy units: simrun (a real service and worker) against raw arq
with the same two processes.

    python benchmarks/overhead.py [--repeat 3] [--slow-units 400] [--fast-units 20000]

Two sizes of unit, each a busy loop (CPU time of the thread, not a sleep): 100 ms
("slow") and 1 ms ("fast"). Everything runs on this machine, on a private Redis
(`simrun.local.redis.PrivateRedis`, or ``REDIS_URL`` with keys under a fresh prefix):

* simrun: ``simrun service`` and one ``simrun worker --processes 2`` as child processes,
  both at their defaults (only the store, Redis, prefix and the benchmark's task type are
  given). Before the measured runs, one small warm-up run per size lets the service learn
  the seconds per unit, so the measured runs are chunked from their first job. Its time is
  the service's own: the task's ``started_s`` (units counted, the first jobs queued in the
  same step) to its ``finished_s`` (the last report applied), read from ``GET /runs/ID``.
* raw arq: two arq worker processes (``max_jobs=1`` each, ``poll_delay=0.01``, msgpack),
  started and ready before the clock starts; the units batched by hand into jobs of about
  ``--arq-job-s`` seconds of work (a user who batches well), all enqueued at once. Its time
  is the first enqueue to the end of the last job (the job's own clock, returned as its
  result).

The overhead of a run is its time over the ideal, ``units x unit_s / 2`` (two processes
fully busy), minus one. The cases are interleaved (simrun and arq alternate, their order
flipped each repeat) and each prints min/median/max; the ratio is simrun's time over arq's
in the same repeat. While the arq peer runs, the simrun service and worker are up and idle
(their polls cost a little CPU, charged to the peer). The machine may be shared: compare
the figures of one invocation, and prefer the minimum.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROCESSES = 2
MEMORY_GB = 4.0
BUSY_REF = "overhead:BUSY"
TYPE_NAME = "bench-busy"


# -- the unit: a busy loop, the same for simrun and arq ------------------------------------


def busy(seconds: float) -> None:
    """Keep this thread on a CPU for ``seconds`` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class BusySettings(BaseModel):
    units: int = 10
    seconds: float = 0.001


def count_units(settings: BusySettings) -> int:
    return settings.units


def busy_unit(settings: BusySettings, index: int, paths: TaskPaths) -> None:
    busy(settings.seconds)


BUSY = TaskType(
    name=TYPE_NAME,
    settings=BusySettings,
    hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.25),
    count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:busy_unit",
    cost_setting="seconds",  # 1 ms and 100 ms units learn apart
)


# -- raw arq: the peer -----------------------------------------------------------------------


async def busy_batch(ctx: dict[str, Any], units: int, seconds: float) -> float:
    """An arq job: ``units`` busy units in a row; the time it ended."""
    for _ in range(units):
        busy(seconds)
    return time.time()


def arq_worker_main(url: str, queue: str) -> None:
    """One raw arq worker process (``--arq-worker``): prints "ready" once it polls."""
    from arq.connections import RedisSettings
    from arq.worker import Worker

    from simrun.core.wire import deserialize, serialize

    async def ready(ctx: dict[str, Any]) -> None:
        print("ready", flush=True)

    worker = Worker(
        functions=[busy_batch],
        queue_name=queue,
        redis_settings=RedisSettings.from_dsn(url),
        on_startup=ready,
        max_jobs=1,
        poll_delay=0.01,
        keep_result=300,
        job_serializer=serialize,
        job_deserializer=deserialize,
        log_results=False,
        handle_signals=True,
    )
    worker.run()


def start_arq_workers(url: str, queue: str) -> list[subprocess.Popen[str]]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__)), "--arq-worker", url, queue],
            cwd=HERE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "ready" not in line:
            stop_all(procs)
            sys.exit(f"an arq worker did not start: {line!r}")
    return procs


def stop_all(procs: Sequence[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def arq_units_per_job(units: int, unit_s: float, job_s: float) -> int:
    """Units in one hand-batched job: about ``job_s`` of work, but at least 4 jobs per
    process (so that both stay busy to the end)."""
    by_time = max(1, round(job_s / unit_s))
    spread = max(1, units // (4 * PROCESSES))
    return min(by_time, spread)


async def arq_case(url: str, units: int, unit_s: float, job_s: float) -> tuple[float, int]:
    """Raw arq's seconds from the first enqueue to the end of the last job, and the units
    per job."""
    from arq.connections import RedisSettings, create_pool

    from simrun.core.wire import deserialize, serialize

    queue = f"bench-arq-{uuid.uuid4().hex[:8]}"
    per_job = arq_units_per_job(units, unit_s, job_s)
    sizes = [min(per_job, units - i) for i in range(0, units, per_job)]
    procs = start_arq_workers(url, queue)
    pool = await create_pool(
        RedisSettings.from_dsn(url), job_serializer=serialize, job_deserializer=deserialize
    )
    try:
        start = time.time()
        jobs = [await pool.enqueue_job("busy_batch", n, unit_s, _queue_name=queue) for n in sizes]
        ends = [await job.result(timeout=600, poll_delay=0.05) for job in jobs if job is not None]
        assert len(ends) == len(sizes)
        return max(ends) - start, per_job
    finally:
        await pool.aclose()
        stop_all(procs)


# -- simrun: a real service and worker ----------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def simrun_exe() -> str:
    beside = Path(sys.executable).parent / "simrun"
    return str(beside) if beside.exists() else "simrun"


def env() -> dict[str, str]:
    """This environment without simrun settings, the benchmarks folder importable."""
    out = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("SIMRUN_")}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), out.get("PYTHONPATH")]))
    return out


@dataclass
class Simrun:
    url: str
    service: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    logs: Path

    def check(self) -> None:
        for name, proc in (("service", self.service), ("worker", self.worker)):
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text()[-3000:]
                sys.exit(f"the simrun {name} ended ({proc.returncode}):\n{tail}")


def start_simrun(redis_url: str, tmp: Path) -> Simrun:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    port = free_port()
    common = ["--redis-url", redis_url, "--prefix", prefix, "--store", str(tmp / "store")]
    common += ["--plugins", BUSY_REF]
    procs = []
    for name, args in (
        ("service", ["service", "--port", str(port)]),
        ("worker", ["worker", "--processes", str(PROCESSES), "--worker-memory-gb", str(MEMORY_GB),
                    "--python-path", str(HERE), "--log-level", "WARNING"]),
    ):  # fmt: skip
        with (tmp / f"{name}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [simrun_exe(), *args, *common],
                    cwd=tmp,
                    env=env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    return Simrun(f"http://127.0.0.1:{port}", procs[0], procs[1], tmp)


def stop_simrun(sim: Simrun) -> None:
    for proc in (sim.worker, sim.service):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # any worker process left behind


def wait_ready(sim: Simrun) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while True:
        sim.check()
        try:
            if httpx.get(f"{sim.url}/health", timeout=1).json().get("workers") == 1:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            sys.exit("the simrun service or worker did not start")
        time.sleep(0.1)


def simrun_case(sim: Simrun, units: int, unit_s: float, label: str) -> tuple[float, float | None]:
    """Submit one run of ``units`` busy units; the task's server-side seconds (started to
    finished) and the seconds per unit the service had learned for it."""
    from simrun.client import Client

    doc = {
        "name": f"overhead-{label}",
        "tasks": [
            {"name": "busy", "type": TYPE_NAME, "settings": {"units": units, "seconds": unit_s}}
        ],
    }
    with Client(sim.url) as client:
        run_id = client.submit(json.dumps(doc), reuse=False)  # work, not reuse
        while True:
            sim.check()
            view = client.run(run_id)
            if view.state != "running":
                break
            blocked = [t.status for t in view.tasks if t.state == "blocked"]
            if blocked:
                sys.exit(f"run {run_id} is blocked: {blocked[0]}")
            time.sleep(0.25)
    if view.state != "succeeded":
        sys.exit(f"run {run_id} ended {view.state}: {view}")
    (task,) = view.tasks
    assert task.started_s is not None, task
    assert task.finished_s is not None, task
    assert task.count("done") == units, task
    return task.finished_s - task.started_s, task.seconds_per_unit


# -- the cases ----------------------------------------------------------------------------------


@dataclass
class Size:
    label: str
    unit_s: float
    units: int
    simrun_s: list[float]
    arq_s: list[float]

    @property
    def ideal_s(self) -> float:
        return self.units * self.unit_s / PROCESSES


def spread(values: Sequence[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def pct(seconds: float, ideal_s: float) -> float:
    return 100.0 * (seconds / ideal_s - 1.0)


async def main(args: argparse.Namespace) -> None:
    from simrun.local.redis import PrivateRedis

    sizes = [
        Size("100 ms units", 0.1, args.slow_units, [], []),
        Size("1 ms units", 0.001, args.fast_units, [], []),
    ]
    sizes = [s for s in sizes if s.units > 0]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"overhead benchmark: {PROCESSES} processes, CPU-busy units; {os.cpu_count()} CPUs, "
        f"load average {load} at start; {args.repeat} repeats, interleaved"
    )
    url = os.environ.get("REDIS_URL")
    server = None
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if not url:
            server = PrivateRedis()
            url = server.start()
        sim = start_simrun(url, tmp)
        try:
            wait_ready(sim)
            for size in sizes:  # warm-up: the service learns the seconds per unit
                warm = max(2 * PROCESSES, min(size.units // 10, int(1.0 / size.unit_s)))
                simrun_case(sim, warm, size.unit_s, "warm-up")
            for rep in range(args.repeat):
                for size in sizes:
                    order = ("simrun", "arq") if rep % 2 == 0 else ("arq", "simrun")
                    for who in order:
                        if who == "simrun":
                            took, learned = simrun_case(sim, size.units, size.unit_s, size.label)
                            size.simrun_s.append(took)
                            note = f"learned {learned * 1e3:.3f} ms/unit" if learned else ""
                        else:
                            took, per_job = await arq_case(
                                url, size.units, size.unit_s, args.arq_job_s
                            )
                            size.arq_s.append(took)
                            note = f"{per_job} units/job"
                        print(
                            f"  repeat {rep + 1} {size.label:<13} {who:<6} {took:8.3f} s  "
                            f"{pct(took, size.ideal_s):+6.1f} % over ideal  {note}",
                            flush=True,
                        )
        finally:
            stop_simrun(sim)
            if server is not None:
                server.stop()
    print("\nsummary: seconds over ideal (min / median / max)")
    for size in sizes:
        ideal = size.ideal_s
        print(f"  {size.label}: {size.units} units, ideal {ideal:.2f} s on {PROCESSES} processes")
        print(f"    simrun   {spread([pct(t, ideal) for t in size.simrun_s], '+.1f')} %")
        print(f"    raw arq  {spread([pct(t, ideal) for t in size.arq_s], '+.1f')} %")
        ratios = [s / a for s, a in zip(size.simrun_s, size.arq_s, strict=True)]
        print(f"    simrun time / arq time  {spread(ratios, '.3f')}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--arq-worker":
        arq_worker_main(sys.argv[2], sys.argv[3])
        sys.exit(0)
    # A SIGTERM (a timeout) still stops the service, the worker and Redis (the finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slow-units", type=int, default=400, help="100 ms units per run")
    parser.add_argument("--fast-units", type=int, default=20000, help="1 ms units per run")
    parser.add_argument(
        "--arq-job-s", type=float, default=1.0, help="seconds of work per raw arq job"
    )
    asyncio.run(main(parser.parse_args()))
