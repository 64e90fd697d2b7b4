"""Latency of ResourceStore.resolve and throughput of its batch record, with peers.

    python benchmarks/store.py [--keys 50] [--per-key 2000] [--resolves 500]

The file first gets ``keys x per-key`` observations (so the index, not luck, finds a key),
then:
- resolve p50/p95 on a key with WINDOW observations and a pending kill, for the store as
  shipped (it keeps one idle connection, so the WAL survives between calls) and for a
  store without it (every call is the file's only connection); the peer floor is the same
  two queries on an open synchronous sqlite3 connection;
- observations recorded per second: batches through record_many (one transaction each)
  against one record() per report.
Targets: p50 resolve < 2 ms, >= 5,000 observations/s.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from simrun.core.reports import WorkerReport
from simrun.plugins import ResourceHint
from simrun.resources import WINDOW, ResourceKey, ResourceStore
from simrun.resources.store import _HISTORY, Record

HINT = ResourceHint()


def report(i: int) -> WorkerReport:
    return WorkerReport(
        peak_memory_gb=(1.0 + (i % 97) / 50,),
        seconds_per_unit=0.5 + (i % 13) / 10,
        units=4,
        limit_gb=8.0,
    )


async def fill(store: ResourceStore, keys: int, per_key: int) -> ResourceKey:
    target = ResourceKey("bench", "model", "target")
    for k in range(keys):
        key = ResourceKey("bench", "model", f"v{k}")
        await store.record_many(
            [Record(key, report(i), 1.0, run=f"r{i % 5}") for i in range(per_key)]
        )
    await store.record_many([Record(target, report(i), 1.0, run="r") for i in range(WINDOW)])
    await store.record(
        target,
        WorkerReport(peak_memory_gb=(), seconds_per_unit=None, units=1, limit_gb=9.0),
        1.0,
        oom=True,
        run="r",
    )
    return target


async def latencies_ms(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    for _ in range(20):  # warm up
        await call()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        out.append((time.perf_counter() - start) * 1000)
    return sorted(out)


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


def sync_floor_ms(path: Path, key: ResourceKey, n: int) -> list[float]:
    conn = sqlite3.connect(path)
    try:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            conn.execute(_HISTORY, {"key": key.text(), "window": WINDOW}).fetchall()
            out.append((time.perf_counter() - start) * 1000)
        return sorted(out)
    finally:
        conn.close()


async def throughput(store: ResourceStore, batch: int, total: int) -> float:
    key = ResourceKey("bench", "model", f"throughput-{batch}")
    start = time.perf_counter()
    done = 0
    while done < total:
        if batch == 1:
            await store.record(key, report(done), 1.0, run="t")
        else:
            await store.record_many([Record(key, report(done + i), 1.0) for i in range(batch)])
        done += batch
    return done / (time.perf_counter() - start)


async def main(keys: int, per_key: int, resolves: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        async with ResourceStore(path) as store:
            start = time.perf_counter()
            target = await fill(store, keys, per_key)
            fill_s = time.perf_counter() - start
            rows = keys * per_key + WINDOW + 1
            print(
                f"{rows:,} observations over {keys + 1} keys written in {fill_s:.2f} s; "
                f"target key: {WINDOW} successes + 1 pending kill"
            )
            resolved = await store.resolve(target, HINT, None)
            print(f"  resolved: {resolved}")
            kept = await latencies_ms(lambda: store.resolve(target, HINT, None), resolves)
            bare_store = ResourceStore(path, keep_open=False)
            store.close()  # the other store alone: each call is the only connection
            bare = await latencies_ms(lambda: bare_store.resolve(target, HINT, None), resolves)
            floor = sync_floor_ms(path, target, resolves)

            print()
            print(f"resolve latency, {resolves} calls (ms)        p50      p95     mean")
            for name, values in (
                ("ResourceStore (keeps one idle connection)", kept),
                ("peer: ResourceStore(keep_open=False)", bare),
                ("peer: the query on an open sqlite3 conn", floor),
            ):
                print(
                    f"  {name:<42} {pct(values, 50):6.3f}  {pct(values, 95):7.3f}  "
                    f"{statistics.fmean(values):7.3f}"
                )
            print(
                f"  p50 ratios: store / no keeper {pct(kept, 50) / pct(bare, 50):.2f}x, "
                f"store / bare query {pct(kept, 50) / pct(floor, 50):.1f}x; "
                f"target p50 < 2 ms: {'met' if pct(kept, 50) < 2 else 'MISSED'}"
            )

            print()
            print("record throughput (observations/s, one transaction per call)")
            single = await throughput(store, 1, 300)
            figures = [(1, single)]
            figures += [(batch, await throughput(store, batch, 20_000)) for batch in (100, 1000)]
            for batch, rate in figures:
                name = "record(), one report per call" if batch == 1 else f"record_many, {batch}"
                print(f"  {name:<42} {rate:>10,.0f}   x{rate / single:.1f} of record()")
            best = max(rate for _, rate in figures)
            print(f"  target >= 5,000 observations/s: {'met' if best >= 5000 else 'MISSED'}")
            store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--per-key", type=int, default=2000)
    parser.add_argument("--resolves", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main(args.keys, args.per_key, args.resolves))
