"""End-to-end throughput of simrun (submit → run succeeded) against raw arq in the same run.

    python benchmarks/throughput.py [--units 20000] [--raw-jobs N] [--single-units 2000]
        [--batch 1000]

Uses ``REDIS_URL`` when set (keys under a fresh prefix), else starts its own redis-server on
a free port. Everything runs on this machine: Redis, this process (the controller, and the
raw arq worker of the peer) and one worker container (``python -m simrun.worker``, 2
worker processes, its default prefetch) as a child process.

* Peer: raw arq, ``--raw-jobs`` no-op jobs (default: ``--units``), tuned as ARQ-NOTES says
  (``poll_delay=0.01``, ``max_jobs=100``, msgpack serializer), enqueued with 32 in flight,
  then drained by a burst worker in this process. Its figure is jobs/s from the first
  enqueue to the end of the worker (the drain alone is printed too). It runs before and
  after the simrun cases, and the faster of the two is the peer (the machine is shared).
* Hand-batched peer: the same raw arq, but ``--batch`` units per job (default 1,000: a user
  who batches by hand), also before and after; the faster is the second peer. The summary
  prints simrun's ratio to each peer.
* simrun: the real `Controller` in this process (its loop an asyncio task, ``poll_s``
  0.01 s, the other settings at their defaults: a window of 64 jobs, about 1 s of work
  per job, at most 1000 units per job) with a workflow of one splittable ``test-noop``
  task. Its figure is units/s from submission to the run's end, by the controller's own
  timestamps (the worker container is up before the clock starts).

  1. cold: a fresh store. Nothing is learned, so the first jobs carry one unit each; once
     their reports are in, the learned seconds per unit sizes the chunks. The chunk sizes
     actually used are printed.
  2. warm: the same store again, the key learned; chunks are sized from the first job.
  3. one unit per job all along (``max_chunk=1``, ``--single-units`` units: fewer, because
     every unit is then a job, a report and a row update): the cost per job.

For each simrun case it prints the breakdown: time to the first enqueue, the chunk sizes
and jobs enqueued, the worker's span (first job start to last job end, from the reports),
report ingestion, and the seconds of each part of the controller's step. The breakdown comes
from wrappers this script puts around the controller's methods (instance attributes, the
code is unchanged); a part it cannot find is shown as n/a. The machine is shared (2 cores
for Redis, controller, worker container and its processes, and whatever else runs):
compare the figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the test task types live in tests/support
    sys.path.insert(0, str(REPO))

from benchmarks.arq_peer import RawArq, raw_arq
from simrun.core.jobs import JobSpec
from simrun.core.layout import StoreLayout
from simrun.core.reports import ReportEntry
from simrun.core.signing import store_key
from simrun.local.redis import PrivateRedis
from simrun.plugins import load_types
from simrun.queues.client import JobQueue
from simrun.runstore.rows import RunRow
from simrun.service.controller import Controller
from simrun.service.settings import ControllerSettings
from tests.support.service_harness import Service, stop_worker

PROCESSES = 2
#: Room for both processes at the default hint (6 GiB each: the no-op type gives none) until
#: the store learns better; it is only what the container's admission counts.
MEMORY_GB = 12.0
NOOP_REF = "tests.support.tasks:NOOP"
TASK_TYPE = "test-noop"
#: The controller's settings besides the store and Redis: a short pause of its loop.
TUNED: dict[str, Any] = {"poll_s": 0.01}
PHASES = ("step", "live_workers", "ingest", "watch", "reconcile", "advance", "dispatch")

P = ParamSpec("P")
R = TypeVar("R")


# -- the peer: raw arq ---------------------------------------------------------------------


# -- instruments around the controller -----------------------------------------------------


@dataclass
class Probe:
    """What the wrapped controller did during one case."""

    phase_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    phase_calls: Counter[str] = field(default_factory=Counter)
    #: Per `enqueue_many` call: unix start, seconds, the chunk sizes it sent.
    enqueues: list[tuple[float, float, list[int]]] = field(default_factory=list)
    #: Per `Ingest.apply` call (one transaction of reports): seconds, entries.
    applies: list[tuple[float, list[ReportEntry]]] = field(default_factory=list)

    def timed(self, name: str, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.phase_s[name] += time.perf_counter() - start
                self.phase_calls[name] += 1

        return wrapper


def _phases(controller: Controller) -> dict[str, tuple[Any, str]]:
    """Where each measured part of a controller step lives: (object, method name)."""
    return {
        "step": (controller, "step"),
        "live_workers": (controller.queue, "live_workers"),
        "ingest": (controller._ingest, "step"),
        "watch": (controller._liveness, "watch"),
        "reconcile": (controller._liveness, "reconcile"),
        "advance": (controller._advance, "step"),
        "dispatch": (controller._dispatcher, "dispatch"),
    }


def instrument(controller: Controller, probe: Probe) -> None:
    """Wrap the controller's step, its parts, report application and enqueueing."""
    for name, (owner, attribute) in _phases(controller).items():
        setattr(owner, attribute, probe.timed(name, getattr(owner, attribute)))

    ingest = controller._ingest
    apply = ingest.apply

    async def applying(entries: Sequence[ReportEntry]) -> bool:
        start = time.perf_counter()
        try:
            return bool(await apply(entries))
        finally:
            probe.applies.append((time.perf_counter() - start, list(entries)))

    ingest.apply = applying  # type: ignore[method-assign]  # a measuring wrapper

    enqueue_many = controller.queue.enqueue_many

    async def enqueueing(specs: Iterable[JobSpec], concurrency: int = 32) -> list[bool]:
        specs = list(specs)
        wall, start = time.time(), time.perf_counter()
        try:
            return await enqueue_many(specs, concurrency)
        finally:
            sizes = [len(s.indices) for s in specs]
            probe.enqueues.append((wall, time.perf_counter() - start, sizes))

    controller.queue.enqueue_many = enqueueing  # type: ignore[method-assign]  # same


# -- one simrun case -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    label: str
    units: int
    elapsed_s: float
    learned_before: float | None
    learned_after: float | None
    probe: Probe
    created_s: float
    finished_s: float

    @property
    def rate(self) -> float:
        return self.units / self.elapsed_s


async def learned_spu(controller: Controller) -> float | None:
    """The seconds per unit the store has learned for the no-op key (None: nothing)."""
    for summary in await controller.queries.resources_by_key():
        if summary.key.task_type == TASK_TYPE:
            return summary.seconds_per_unit
    return None


async def simrun_case(
    settings: ControllerSettings, label: str, units: int, timeout_s: float
) -> Case:
    """Open a controller on the store, run one workflow of ``units`` no-op units, close it."""
    controller = await Controller.open(settings, load_types((NOOP_REF,)))
    probe = Probe()
    try:
        learned_before = await learned_spu(controller)
        instrument(controller, probe)
    except BaseException:
        await controller.close()
        raise
    service = Service(controller)
    try:
        doc = {
            "name": f"throughput-{label}",
            "tasks": [{"name": "noop", "type": TASK_TYPE, "settings": {"units": units}}],
        }
        run_id = await service.submit(json.dumps(doc), reuse=False)  # work, not reuse
        row = await until_ended(service, run_id, timeout_s)
        assert row.state == "succeeded", row
        assert row.finished_s is not None
        counts = (await controller.store.counts(run_id))["noop"]
        assert counts.done == units == counts.total, counts
        learned_after = await learned_spu(controller)
    finally:
        await service.close()  # closes the controller too
    return Case(
        label,
        units,
        row.finished_s - row.created_s,
        learned_before,
        learned_after,
        probe,
        row.created_s,
        row.finished_s,
    )


async def until_ended(service: Service, run_id: str, timeout_s: float) -> RunRow:
    """The run once it ended; exits when the loop fails, the task is blocked, or too late."""
    store = service.controller.store
    deadline = time.monotonic() + timeout_s
    while True:
        service.check()
        row = await store.run(run_id)
        assert row is not None
        if row.state != "running":
            return row
        for task in await store.tasks(run_id):
            if task.state == "blocked":
                sys.exit(f"task {task.name} is blocked: {task.status}")
        if time.monotonic() > deadline:
            sys.exit(f"run {run_id} still running after {timeout_s:g} s")
        await asyncio.sleep(0.02)


def sizes_in_order(enqueues: Sequence[tuple[float, float, list[int]]]) -> str:
    """Chunk sizes as runs in the order they were sent: "64 x 1, then 20 x 1000"."""
    runs: list[list[int]] = []
    for _, _, sizes in enqueues:
        for size in sizes:
            if runs and runs[-1][0] == size:
                runs[-1][1] += 1
            else:
                runs.append([size, 1])
    if len(runs) > 6:
        counted = Counter[int]()
        for size, n in runs:
            counted[size] += n
        return "mixed: " + ", ".join(f"{n} x {s}" for s, n in sorted(counted.items()))
    return ", then ".join(f"{n} x {s}" for s, n in runs)


def us(seconds: float | None) -> str:
    return "nothing" if seconds is None else f"{seconds * 1e6:.1f} us"


def print_case(case: Case, raw: RawArq) -> None:
    p = case.probe
    jobs = sum(len(sizes) for _, _, sizes in p.enqueues)
    sent = sum(sum(sizes) for _, _, sizes in p.enqueues)
    entries = [e for _, batch in p.applies for e in batch]
    reported = sum(len(e.outcomes) for e in entries)
    apply_s = sum(s for s, _ in p.applies)
    print(
        f"\n{case.label}: {case.units} units in {case.elapsed_s:.2f} s = {case.rate:,.0f} units/s"
        f"  ({case.rate / raw.rate:.2f}x raw arq end to end, "
        f"{case.rate / raw.drain_rate:.2f}x its drain alone)"
    )
    print(
        f"   learned seconds per unit: before {us(case.learned_before)}, "
        f"after {us(case.learned_after)}"
    )
    if p.enqueues:
        first = p.enqueues[0][0] - case.created_s
        print(f"   submit -> first enqueue      {first:8.3f} s")
        print(f"   chunk sizes (in order)       {sizes_in_order(p.enqueues)}")
        enqueue_s = sum(s for _, s, _ in p.enqueues)
        print(
            f"   jobs enqueued                {jobs} ({sent} units) in {len(p.enqueues)} calls, "
            f"{enqueue_s:.3f} s in enqueue_many"
        )
    if entries:
        started = min(e.started for e in entries) - case.created_s
        span = max(e.finished for e in entries) - min(e.started for e in entries)
        busy = sum(e.finished - e.started for e in entries)
        tail = case.finished_s - max(e.finished for e in entries)
        print(f"   submit -> first job started  {started:8.3f} s (worker clock)")
        print(
            f"   worker span                  {span:8.3f} s first start to last end; "
            f"jobs busy {busy:.3f} s summed"
        )
        print(f"   last job end -> run ended    {tail:8.3f} s")
        print(
            f"   report ingestion             {len(entries)} reports ({reported} units) in "
            f"{len(p.applies)} transactions, {apply_s:.3f} s "
            f"({1e3 * apply_s / len(entries):.2f} ms/report, "
            f"{1e6 * apply_s / max(1, reported):.1f} us/unit)"
        )
    parts = []
    for name in PHASES:
        if p.phase_calls[name]:
            parts.append(f"{name} {p.phase_s[name]:.3f}")
        else:
            parts.append(f"{name} n/a")
    print(f"   controller seconds by part   {', '.join(parts)}")
    print(
        f"     ({p.phase_calls['step']} steps; reconcile includes its own ingest; "
        f"live_workers counts every call)"
    )


# -- the worker container ------------------------------------------------------------------


def spawn_worker(url: str, prefix: str, store: Path, log: Path) -> subprocess.Popen[bytes]:
    """``python -m simrun.cli worker`` serving the no-op type, its output in ``log`` (its
    jobs signed with the key of ``store``, as the service's)."""
    argv = [
        sys.executable, "-m", "simrun.cli", "worker", "--queue", "cpu",
        "--processes", str(PROCESSES), "--worker-memory-gb", str(MEMORY_GB),
        "--plugins", NOOP_REF, "--python-path", str(REPO),
        "--prefix", prefix, "--redis-url", url, "--poll-delay-s", "0.01", "--log-level", "WARNING",
        "--store", str(store),
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def give_up(proc: subprocess.Popen[bytes], log: Path) -> None:
    stop_worker(proc)
    sys.exit(f"the worker container did not start:\n{log.read_text()[-3000:]}")


async def wait_for_worker(
    url: str, prefix: str, store: Path, proc: subprocess.Popen[bytes], log: Path
) -> None:
    """Return once the worker container's heartbeat shows (exit when it does not)."""
    key = store_key(StoreLayout(store).job_key)
    queue = await JobQueue.connect(url, prefix, key=key)
    try:
        deadline = time.monotonic() + 60
        while not await queue.live_workers():
            if proc.poll() is not None or time.monotonic() > deadline:
                give_up(proc, log)
            await asyncio.sleep(0.05)
    finally:
        await queue.close()


def print_raw(label: str, raw: RawArq) -> None:
    what = "no-op jobs" if raw.per_job == 1 else f"no-op units, {raw.per_job} per job"
    print(
        f"\nraw arq, {label}: {raw.jobs} {what}, enqueue {raw.enqueue_s:.2f} s + drain "
        f"{raw.drain_s:.2f} s = {raw.rate:,.0f} units/s end to end "
        f"(drain alone {raw.drain_rate:,.0f} units/s)"
    )


async def simrun_cases(url: str, tmp: Path, args: argparse.Namespace) -> list[Case]:
    """The simrun cases, with one worker container up from before the first to the last."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    log = tmp / "worker.log"
    store = tmp / "store"
    worker = spawn_worker(url, prefix, store, log)
    try:
        await wait_for_worker(url, prefix, store, worker, log)
        base = ControllerSettings(store=store, redis_url=url, prefix=prefix, **TUNED)
        cases = [
            await simrun_case(base, "simrun, cold store", args.units, args.timeout_s),
            await simrun_case(base, "simrun, warm store", args.units, args.timeout_s),
        ]
        if args.single_units:
            single = replace(base, db_path=tmp / "single.db", max_chunk=1)
            label = "simrun, 1 unit per job (max_chunk=1)"
            cases.append(await simrun_case(single, label, args.single_units, args.timeout_s))
        return cases
    finally:
        stop_worker(worker)


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING)
    url = os.environ.get("REDIS_URL")  # the benchmark is a script, not simrun: it may look
    server: PrivateRedis | None = None
    raw_jobs = args.raw_jobs or args.units
    with tempfile.TemporaryDirectory() as tmp:
        if not url:
            server = PrivateRedis()
            url = server.start()
        try:
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            print(
                f"throughput benchmark: redis {url}; one worker container of {PROCESSES} "
                f"processes; controller in this process ({TUNED}); {os.cpu_count()} CPUs, "
                f"load average {load} at start"
            )
            before = await raw_arq(url, raw_jobs)
            print_raw("before simrun", before)
            batched_before = await raw_arq(url, args.units, args.batch)
            print_raw("hand-batched, before simrun", batched_before)
            cases = await simrun_cases(url, Path(tmp), args)
            batched_after = await raw_arq(url, args.units, args.batch)
            print_raw("hand-batched, after simrun", batched_after)
            after = await raw_arq(url, raw_jobs)
            print_raw("after simrun", after)
            raw = max(before, after, key=lambda r: r.rate)
            batched = max(batched_before, batched_after, key=lambda r: r.rate)
            print(f"   (the peer is the faster of the two: {raw.rate:,.0f} jobs/s end to end)")
            print(f"   (hand-batched: the faster of the two, {batched.rate:,.0f} units/s)")
            for case in cases:
                print_case(case, raw)
            print(
                "\nsummary (units/s; ratio = simrun / raw arq end to end, the faster run of "
                "each peer)"
            )
            print(f"   {'raw arq no-op jobs, 1 unit per job':<46} {raw.rate:9,.0f}   (peer 1)")
            label = f"raw arq, {args.batch} units per job"
            print(f"   {label:<46} {batched.rate:9,.0f}   (peer 2)")
            print(f"   {'':<46} {'':9}   vs peer 1  vs peer 2")
            for case in cases:
                print(
                    f"   {case.label + f', {case.units} units':<46} {case.rate:9,.0f}   "
                    f"{case.rate / raw.rate:7.2f}x  {case.rate / batched.rate:7.3f}x"
                )
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=20000, help="no-op units per simrun run")
    parser.add_argument(
        "--raw-jobs", type=int, default=0, help="raw arq no-op jobs [default: --units]"
    )
    parser.add_argument(
        "--single-units",
        type=int,
        default=2000,
        help="units of the one-unit-per-job case (0 skips it)",
    )
    parser.add_argument(
        "--batch", type=int, default=1000, help="units per job of the hand-batched raw arq peer"
    )
    parser.add_argument("--timeout-s", type=float, default=300.0, help="bound of one simrun run")
    asyncio.run(main(parser.parse_args()))
