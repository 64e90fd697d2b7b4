"""Time of a page of a task's units (``GET /runs/{id}/units``) whose units are a range.

    python benchmarks/unit_pages.py [--sizes 10000,100000,1000000] [--repeat 5]

For each size, a task of that many units on a real SQLite run store, whose units are one
span (reused, done), one range job in flight (queued), or its frontier (pending); the last
page of 100 is read two ways: by a listing of the state cut to the page (every unit made,
what the route did for a span or a range job) and by `RunStore.unit_page` (the page made
from range arithmetic). Target: the page costs the same at every size, under 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from simrun.core.states import UnitState
from simrun.runstore.rows import NewJob, NewRun, NewTask
from simrun.runstore.store import RunStore

PAGE = 100
STATES: tuple[UnitState, ...] = ("done", "queued", "pending")


async def filled(path: Path, size: int, state: UnitState) -> RunStore:
    """A store with one task of ``size`` units, all of them in ``state`` as one range."""
    store = await RunStore.open(path)
    task = NewTask("sweep", "heat", 0, {}, {}, (), True, False)
    await store.create_run(NewRun("r1", None, "m", "tasks: []", (task,), 100.0))
    reused = [range(size)] if state == "done" else []
    await store.start_task("r1", "sweep", size, 101.0, reused=reused, reused_from="r0")
    if state == "queued":
        job = NewJob("j", "r1", "sweep", "chunk", "cpu", 1, range(size), 1.0, fresh=True)
        await store.add_jobs([job], now_s=102.0)
    return store


async def median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def last_page_ms(
    store: RunStore, size: int, state: UnitState, repeat: int
) -> tuple[float, float]:
    """The last page by a listing of ``state`` cut to it, and by `RunStore.unit_page`."""
    offset = size - PAGE

    async def listing() -> Any:
        return (await store.units("r1", "sweep", (state,)))[offset : offset + PAGE]

    async def page() -> Any:
        return await store.unit_page("r1", "sweep", state, offset, PAGE)

    return await median_ms(listing, repeat), await median_ms(page, repeat)


async def main(sizes: list[int], repeat: int) -> None:
    print(f"{'units':>9} {'state':>8} {'listing ms':>11} {'unit_page ms':>13}")
    for size in sizes:
        for state in STATES:
            with tempfile.TemporaryDirectory() as tmp:
                store = await filled(Path(tmp) / "simrun.db", size, state)
                before, after = await last_page_ms(store, size, state, repeat)
                await store.close()
            print(f"{size:>9} {state:>8} {before:>11.1f} {after:>13.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main([int(s) for s in args.sizes.split(",")], args.repeat))
