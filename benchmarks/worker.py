"""Throughput and overhead of one simrun worker container, against raw arq in the same run.

    python benchmarks/worker.py [--jobs 2000] [--chunk 50] [--cpu-units 40]

Uses ``REDIS_URL`` when set (keys under a fresh prefix), else starts its own redis-server on
a free port. Two cases:

1. No-op units. Peer: raw arq no-op jobs (one coroutine that returns at once), tuned as
   ARQ-NOTES says (``poll_delay=0.01``, ``max_jobs=100``, msgpack serializer), burst mode,
   the same Redis. simrun: one container with 2 worker processes in burst mode, with one
   unit per job (the worst case: a job, an admission, a report per unit; with the default
   prefetch, then with a prefetch tuned like arq's ``max_jobs``) and with ``--chunk`` units
   per job (how the service dispatches short units). Figure: units/s, and
   the ratio to raw arq jobs/s.
2. CPU units of 100 ms (a busy loop), ``--cpu-units`` of them on 2 processes, in chunks of
   ten (about one second of work per job) and one per job. Figure: the wall time against the
   ideal ``units x 0.1 s / 2``.

simrun's time runs from the start of its first job to the end of its last (from its reports),
so that starting the worker processes is not counted; arq's from the start of the worker to
its end. The machine is shared: compare the figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the test task types live in tests/support
    sys.path.insert(0, str(REPO))

from benchmarks.arq_peer import raw_arq
from simrun.core.reports import ReportEntry
from simrun.local.redis import PrivateRedis
from simrun.queues.client import JobQueue
from tests.support.harness import make_container, make_spec
from tests.support.keys import TEST_KEY

CPU_UNIT_S = 0.1
PROCESSES = 2
#: Jobs a container may hold beyond its slots, as tuned for one-unit jobs (the default is
#: the number of slots, which suits jobs of about a second).
PREFETCH_TUNED = 30


async def simrun_run(
    url: str,
    store: Path,
    task_type: str,
    units: int,
    chunk: int,
    settings: dict[str, Any],
    prefetch: int | None = None,
) -> tuple[int, float]:
    """Completed units and the seconds from the first job's start to the last job's end."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    task = f"{task_type}-{chunk}"
    specs = [
        make_spec(store, task, task_type, range(i, min(i + chunk, units)), settings)
        for i in range(0, units, chunk)
    ]
    queue = await JobQueue.connect(url, prefix, key=TEST_KEY)
    try:
        assert all(await queue.enqueue_many(specs))
        worker = make_container(
            url,
            prefix,
            memory_gb=4.0,
            processes=PROCESSES,
            grace_s=5.0,
            prefetch=prefetch,
            store=store,
        )
        await worker.run()
        entries: list[ReportEntry] = []
        while batch := await queue.read_reports("bench", "b", count=1000, block_ms=None):
            entries += [item.entry for item in batch if item.entry is not None]
            await queue.ack("bench", [item.id for item in batch])
    finally:
        await queue.close()
    done = sum(1 for e in entries for o in e.outcomes.values() if o == "done")
    return done, max(e.finished for e in entries) - min(e.started for e in entries)


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING)
    url = os.environ.get("REDIS_URL")  # the benchmark is a script, not simrun: it may look
    server: PrivateRedis | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if not url:
            server = PrivateRedis()
            url = server.start()
        try:
            store = Path(tmp) / "store"
            print(f"worker benchmark: {PROCESSES} worker processes, redis {url}")
            arq_rate = (await raw_arq(url, args.jobs)).drain_rate
            single_units = args.jobs // 2
            done1, s1 = await simrun_run(url, store, "test-noop", single_units, 1, {})
            done_p, sp = await simrun_run(
                url, store, "test-noop", single_units, 1, {}, prefetch=PREFETCH_TUNED
            )
            chunked_units = args.jobs * 5
            done_c, sc = await simrun_run(url, store, "test-noop", chunked_units, args.chunk, {})
            assert done1 == done_p == single_units
            assert done_c == chunked_units
            print("\n1) no-op units")
            print(f"   raw arq no-op jobs                 {arq_rate:9.0f} jobs/s   (peer)")
            for label, done, secs in (
                ("simrun, 1 unit per job", done1, s1),
                (f"  same, prefetch {PREFETCH_TUNED}", done_p, sp),
                (f"simrun, {args.chunk} units per job", done_c, sc),
            ):
                rate = done / secs
                print(
                    f"   {label:<34} {rate:9.0f} units/s  "
                    f"({rate / arq_rate:.2f}x raw arq; {done} units in {secs:.2f} s)"
                )
            print(f"\n2) CPU units of {CPU_UNIT_S * 1000:.0f} ms, {args.cpu_units} units")
            ideal = args.cpu_units * CPU_UNIT_S / PROCESSES
            for chunk in (10, 1):
                done, secs = await simrun_run(
                    url, store, "test-spin", args.cpu_units, chunk, {"seconds": CPU_UNIT_S}
                )
                assert done == args.cpu_units
                print(
                    f"   {chunk:>2} unit(s) per job: {secs:6.2f} s against the ideal "
                    f"{ideal:.2f} s (units x {CPU_UNIT_S} s / {PROCESSES}): "
                    f"overhead {100 * (secs / ideal - 1):+.1f} %"
                )
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="raw arq no-op jobs")
    parser.add_argument("--chunk", type=int, default=50, help="no-op units per simrun job")
    parser.add_argument("--cpu-units", type=int, default=40, help="100 ms units")
    asyncio.run(main(parser.parse_args()))
