"""Scale: N no-op units through a real `simrun service` and one `simrun worker` container.

    python benchmarks/scale.py                          # --sizes 100000,1000000
    python benchmarks/scale.py --sizes 2000,20000 --repeat 3
    python benchmarks/scale.py --root DIR               # another checkout's simrun

Each measurement starts from nothing: a private redis-server (`PrivateRedis`), a temporary
store, ``python -m simrun.cli service`` and ``python -m simrun.cli worker`` (one container,
2 processes, queue cpu) run from ``--root`` (PYTHONPATH ``ROOT:benchmarks``), then posts a
one-task workflow of N units of the ``scale-noop`` type defined in this file (loaded with
``--plugins scale:NOOP``: its units do nothing). The sizes are interleaved over the repeats
(100k, 1M, 100k, 1M, ...). Figures per measurement (see NOTES-scalebench.md):

* units/s: N / (task finished_s - task started_s), the service's own timestamps from
  ``GET /runs/RUN`` (the task starts when the controller begins it: counting included);
  also "dispatch": first unit queued -> last unit done, read from the SQLite file
  (read-only, after the service stopped) when its units table has those columns;
* submit -> first done: from the start of ``POST /runs`` to the first ``GET /runs/RUN``
  (polled every 20 ms) that shows a unit done; the POST's own time too;
* peak service RSS: VmRSS of the service process and its descendants, every 50 ms;
* peak Redis memory: ``INFO memory`` used_memory_peak at the end (a fresh server);
* SQLite + WAL: the store's simrun.db and simrun.db-wal right after the run ended;
* GET /runs/RUN: median of 5 over HTTP after the run; status: median of 5 whole
  ``python -m simrun.cli status RUN`` processes;
* ETA error: ``eta_s`` of ``GET /runs/RUN`` sampled every ``--sample-s`` during the run,
  from 10 % done on, |eta - real remaining| / real remaining (samples with less than 2 s
  left skipped), median and max; real remaining = run finished_s - time of the sample.

The machine is shared: compare the figures of one invocation (or of --root runs made one
after the other), not across days.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from simrun.plugins import TaskPaths, TaskType

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TASK_TYPE = "scale-noop"
#: How the service and the worker load the type: this file as module ``scale``.
PLUGIN = "scale:NOOP"
PROCESSES = 2
#: What the container's admission counts (the type gives no hint: 6 GiB a process).
MEMORY_GB = 12.0
#: Samples of the ETA closer to the end than this are skipped (tiny denominators).
ETA_MIN_REMAINING_S = 2.0
ETA_FROM_DONE = 0.10


class Settings(BaseModel):
    units: int = 1


def count_units(settings: Settings) -> int:
    return settings.units


def noop_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    """Does nothing: what is measured is simrun's own cost per unit."""


NOOP = TaskType(
    name=TASK_TYPE,
    settings=Settings,
    count_units="scale:count_units",
    compute_unit="scale:noop_unit",
)


# -- processes -----------------------------------------------------------------------------


def child_env(root: Path, max_units: int) -> dict[str, str]:
    """The environment of the service, worker and status processes: ``root`` first on the
    path, then this directory (the plugin); no SIMRUN_* of the caller but the raised unit
    limits (an older service ignores them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMRUN_")}
    env.pop("REDIS_URL", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(BENCH)])
    env["SIMRUN_MAX_UNITS_PER_TASK"] = str(max(max_units, 1_000_000))
    env["SIMRUN_MAX_UNITS_PER_RUN"] = str(max(max_units, 2_000_000))
    return env


def spawn(argv: list[str], root: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "simrun.cli", *argv],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes], grace_s: float = 60.0) -> None:
    """SIGTERM, then SIGKILL; then anything left in its process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def tree_rss_kb(pid: int) -> int:
    """VmRSS (KiB) of ``pid`` and its descendants (0 for a process gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
                break
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return total


class RssSampler:
    """The peak VmRSS of a process tree, sampled every ``every_s`` in a thread."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self.pid, self.every_s, self.peak_kb = pid, every_s, 0
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.halt.is_set():
            self.peak_kb = max(self.peak_kb, tree_rss_kb(self.pid))
            self.halt.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.thread.join()


# -- one measurement -----------------------------------------------------------------------


@dataclass
class Measure:
    size: int
    repeat: int
    figures: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def wait_until(
    check: Callable[[], bool], timeout_s: float, what: str, logs: Sequence[Path]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
            sys.exit(f"{what} did not happen within {timeout_s:g} s\n{tails}")
        time.sleep(0.05)


def health(url: str) -> dict[str, Any] | None:
    import httpx

    try:
        answer: dict[str, Any] = httpx.get(f"{url}/health", timeout=2).json()
        return answer
    except (httpx.HTTPError, ValueError):
        return None


def done_of(view: dict[str, Any]) -> int:
    return sum(int((t.get("counts") or {}).get("done", 0)) for t in view.get("tasks", []))


def eta_errors(
    samples: Sequence[tuple[float, int, float | None]], size: int, finished_s: float
) -> tuple[list[float], int]:
    """Relative errors of the sampled ETAs from ``ETA_FROM_DONE`` done on, and the number
    of such samples without an ETA."""
    errors, missing = [], 0
    for t, done, eta in samples:
        real = finished_s - t
        if done < ETA_FROM_DONE * size or real < ETA_MIN_REMAINING_S:
            continue
        if eta is None:
            missing += 1
        else:
            errors.append(abs(eta - real) / real)
    return errors, missing


def halves(
    samples: Sequence[tuple[float, int, float | None]], size: int, finished_s: float
) -> tuple[float | None, float | None]:
    """Units/s from the first sample with a unit done to the first at half done, and from
    there to the end."""
    first = next(((t, d) for t, d, _ in samples if d >= 1), None)
    half = next(((t, d) for t, d, _ in samples if d >= size / 2), None)
    if first is None or half is None or half[0] <= first[0] or finished_s <= half[0]:
        return None, None
    return (half[1] - first[1]) / (half[0] - first[0]), (size - half[1]) / (finished_s - half[0])


def dispatch_span(db: Path, run_id: str) -> tuple[float, float] | None:
    """First unit queued and last unit done, from the units table of a store that keeps
    one row per unit with those columns (None otherwise)."""
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cols = {row[1] for row in conn.execute("PRAGMA table_info(units)")}
        if not {"queued_s", "finished_s", "run_id"} <= cols:
            return None
        row = conn.execute(
            "SELECT min(queued_s), max(finished_s) FROM units WHERE run_id = ?", (run_id,)
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    if row is None or row[0] is None or row[1] is None:
        return None
    return float(row[0]), float(row[1])


def file_mb(path: Path) -> float:
    return path.stat().st_size / 1e6 if path.exists() else 0.0


def measure(args: argparse.Namespace, size: int, repeat: int, tmp: Path) -> Measure:
    import httpx
    import redis

    from simrun.local.machine import free_port
    from simrun.local.redis import PrivateRedis

    out = Measure(size, repeat)
    f = out.figures
    root: Path = args.root
    env = child_env(root, size)
    prefix = f"scale-{uuid.uuid4().hex[:8]}"
    store = tmp / f"store-{size}-{repeat}"
    service_log, worker_log = tmp / f"service-{size}-{repeat}.log", tmp / "worker.log"
    logs = [service_log, worker_log]
    server = PrivateRedis()
    redis_url = server.start()
    rclient = redis.Redis.from_url(redis_url)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    service = worker = None
    try:
        rclient.config_resetstat()
        service = spawn(
            ["service", "--port", str(port), "--redis-url", redis_url, "--store", str(store),
             "--prefix", prefix, "--plugins", PLUGIN],
            root, env, service_log,
        )  # fmt: skip
        worker = spawn(
            ["worker", "--queue", "cpu", "--processes", str(PROCESSES), "--worker-memory-gb",
             str(MEMORY_GB), "--plugins", PLUGIN, "--python-path", str(BENCH), "--prefix",
             prefix, "--redis-url", redis_url, "--log-level", "WARNING", "--store", str(store)],
            root, env, worker_log,
        )  # fmt: skip
        wait_until(
            lambda: (health(url) or {}).get("workers", 0) >= 1,
            90,
            "service up with a live worker",
            logs,
        )
        time.sleep(0.5)  # let the service settle after start
        f["idle_rss_mb"] = tree_rss_kb(service.pid) / 1024
        doc = {
            "name": f"scale-{size}",
            "tasks": [{"name": "noop", "type": TASK_TYPE, "settings": {"units": size}}],
        }
        samples: list[tuple[float, int, float | None]] = []
        view: dict[str, Any] = {}
        with RssSampler(service.pid) as rss, httpx.Client(base_url=url, timeout=600) as client:
            posted = time.perf_counter()
            answer = client.post("/runs", json={"workflow": json.dumps(doc), "reuse": False})
            f["post_s"] = time.perf_counter() - posted
            if answer.status_code >= 300:
                sys.exit(f"POST /runs answered {answer.status_code}: {answer.text[:2000]}")
            run_id = answer.json()["run"]
            deadline = time.monotonic() + args.timeout_s
            first_done = None
            while True:
                before = time.time()
                view = client.get(f"/runs/{run_id}").json()
                at = (before + time.time()) / 2
                done = done_of(view)
                samples.append((at, done, view.get("eta_s")))
                if first_done is None and done >= 1:
                    first_done = time.perf_counter() - posted
                    f["first_done_s"] = first_done
                if view.get("state") != "running":
                    break
                if time.monotonic() > deadline:
                    out.notes.append(f"timed out after {args.timeout_s:g} s at {done} done")
                    break
                time.sleep(0.02 if first_done is None else args.sample_s)
        f["peak_rss_mb"] = rss.peak_kb / 1024
        db = store / "simrun.db"
        f["sqlite_mb"] = file_mb(db)
        f["wal_mb"] = file_mb(db.with_name(db.name + "-wal"))
        info = cast("dict[str, Any]", rclient.info("memory"))  # a blocking client: a dict
        f["redis_peak_mb"] = float(info["used_memory_peak"]) / 1e6
        f["redis_end_mb"] = float(info["used_memory"]) / 1e6
        state = view.get("state")
        if state != "succeeded":
            out.notes.append(f"run ended {state}: {view.get('message')}")
        tasks = view.get("tasks") or [{}]
        started, finished = tasks[0].get("started_s"), tasks[0].get("finished_s")
        if started is not None and finished is not None and finished > started:
            f["rate"] = size / (finished - started)
        run_end = view.get("finished_s")
        if run_end is not None:
            f["run_rate"] = size / (run_end - view["created_s"])
            errors, missing = eta_errors(samples, size, run_end)
            f["eta_err_median"] = statistics.median(errors) if errors else None
            f["eta_err_max"] = max(errors) if errors else None
            f["eta_samples"] = len(errors)
            f["eta_missing"] = missing
            f["rate_1st_half"], f["rate_2nd_half"] = halves(samples, size, run_end)
        gets = []
        with httpx.Client(base_url=url, timeout=60) as client:
            for _ in range(5):
                start = time.perf_counter()
                client.get(f"/runs/{run_id}").raise_for_status()
                gets.append(time.perf_counter() - start)
        f["get_ms"] = statistics.median(gets) * 1e3
        statuses = []
        for _ in range(5):
            start = time.perf_counter()
            done_proc = subprocess.run(
                [sys.executable, "-m", "simrun.cli", "status", run_id, "--url", url],
                cwd=root, env=env, capture_output=True, check=False,
            )  # fmt: skip
            statuses.append(time.perf_counter() - start)
            if done_proc.returncode != 0:
                out.notes.append(
                    f"status exited {done_proc.returncode}: {done_proc.stderr[-500:]!r}"
                )
        f["status_ms"] = statistics.median(statuses) * 1e3
    finally:
        for proc in (worker, service):
            if proc is not None:
                stop(proc)
        rclient.close()
        server.stop()
    span = dispatch_span(store / "simrun.db", run_id)
    if span is not None and span[1] > span[0]:
        f["dispatch_rate"] = size / (span[1] - span[0])
    shutil.rmtree(store, ignore_errors=True)  # a 1 M store of today's schema is 0.5 GB
    return out


# -- output --------------------------------------------------------------------------------

#: (key, label, format): the rows of the summary table.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("rate", "units/s server side (task start -> end)", ",.0f"),
    ("dispatch_rate", "units/s first queued -> last done (SQLite)", ",.0f"),
    ("run_rate", "units/s run created -> ended", ",.0f"),
    ("rate_1st_half", "units/s first done -> half done", ",.0f"),
    ("rate_2nd_half", "units/s half done -> end", ",.0f"),
    ("first_done_s", "submit -> first unit done (s)", ".2f"),
    ("post_s", "POST /runs returned after (s)", ".3f"),
    ("idle_rss_mb", "service RSS idle before submit (MB)", ".0f"),
    ("peak_rss_mb", "peak service RSS (MB)", ".0f"),
    ("redis_peak_mb", "peak Redis used_memory (MB)", ".1f"),
    ("redis_end_mb", "Redis used_memory at the end (MB)", ".1f"),
    ("sqlite_mb", "SQLite file after the run (MB)", ".1f"),
    ("wal_mb", "SQLite WAL after the run (MB)", ".1f"),
    ("get_ms", "GET /runs/RUN, median of 5 (ms)", ".1f"),
    ("status_ms", "simrun status RUN process, median of 5 (ms)", ".0f"),
    ("eta_err_median", "ETA relative error from 10 % done, median", ".2f"),
    ("eta_err_max", "ETA relative error from 10 % done, max", ".2f"),
    ("eta_samples", "ETA samples counted", ".0f"),
    ("eta_missing", "ETA samples without an ETA (None)", ".0f"),
)


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_measure(m: Measure) -> None:
    print(f"\n{m.size:,} units, repeat {m.repeat + 1}:", flush=True)
    for key, label, spec in ROWS:
        print(f"   {label:<46} {fmt(m.figures.get(key), spec):>12}")
    for note in m.notes:
        print(f"   note: {note}")


def spread(values: Sequence[float | None], spec: str) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    parts = (min(known), statistics.median(known), max(known))
    return " / ".join(format(v, spec) for v in parts)


def print_table(sizes: Sequence[int], measures: Sequence[Measure], repeat: int) -> None:
    width = 34
    print(f"\nsummary: min / median / max over {repeat} repeat(s)")
    print(f"   {'':<46}" + "".join(f"{f'{s:,} units':>{width}}" for s in sizes))
    for key, label, spec in ROWS:
        cells = [spread([m.figures.get(key) for m in measures if m.size == s], spec) for s in sizes]
        print(f"   {label:<46}" + "".join(f"{c:>{width}}" for c in cells))
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        ratios: list[float | None] = []
        for r in range(repeat):
            a = next(
                (m.figures.get("rate") for m in measures if (m.size, m.repeat) == (small, r)), None
            )
            b = next(
                (m.figures.get("rate") for m in measures if (m.size, m.repeat) == (large, r)), None
            )
            ratios.append(b / a if a and b else None)
        print(
            f"   rate ratio {large:,} / {small:,} units (paired by repeat): {spread(ratios, '.2f')}"
        )


def checkout(root: Path) -> str:
    """The commit of ``root`` and whether its simrun/ has changes not committed."""

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *argv], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--", "simrun")
    return commit + (" + changes not committed in simrun/" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="units per run, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per size, interleaved")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout whose simrun runs")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="bound of one run")
    parser.add_argument(
        "--sample-s", type=float, default=1.0, help="GET /runs/RUN every this after the first done"
    )
    args = parser.parse_args()
    args.root = args.root.resolve()
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"scale benchmark: simrun from {args.root} ({checkout(args.root)}); one worker "
        f"container of {PROCESSES} processes; sizes {sizes} x {args.repeat}; "
        f"{os.cpu_count()} CPUs, load {load}",
        flush=True,
    )
    measures: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="simrun-scale-") as tmp:
        for r in range(args.repeat):
            for size in sizes:
                m = measure(args, size, r, Path(tmp))
                print_measure(m)
                measures.append(m)
    print_table(sizes, measures, args.repeat)


if __name__ == "__main__":
    main()
