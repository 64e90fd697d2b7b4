"""What a worker process measures when it switches task, and what a switch costs.

    python benchmarks/task_switch.py [--rounds 20]

One worker process (a real `ProcessPool` of 1) alternates jobs of two task types A and B,
five units per job, ``--rounds`` times each. Each case prints B's peak per process alone (a
fresh pool that runs only B: the peer, what B really uses), B's and A's peaks while they
alternate, how many times the process was started afresh, and the wall time per job. The
rule checked (`simrun.worker.pool.processes`): a process that switches task while keeping
more than `RECYCLE_KEPT_GB` beyond its baseline is started afresh, so B's figure while
alternating stays within that of B alone. The test task types live in tests/support.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the test task types live in tests/support
    sys.path.insert(0, str(REPO))

from simrun.worker.ledger import Ledger
from simrun.worker.pool.processes import RECYCLE_KEPT_GB, ProcessPool
from simrun.worker.pool.runner import run_chunk
from tests.support.harness import PLUGINS, make_spec

LIMIT_GB = 0.5
Kind = tuple[str, dict[str, Any]]

CASES: list[tuple[str, Kind, Kind]] = [
    ("light / light", ("test-noop", {}), ("test-sleep", {})),
    ("setup holds 50 MiB / light", ("test-hog", {"setup_mb": 50}), ("test-noop", {})),
    ("leaks 2 MiB a unit / light", ("test-hog", {"keep_mb": 2}), ("test-noop", {})),
]


async def _never(_unit: int | str) -> bool:
    return False


async def alternate(jobs: list[tuple[str, Kind]]) -> tuple[dict[str, list[float]], int, float]:
    """Run ``jobs`` (label, (type, settings)) in order on one process: peaks in MiB by
    label, the restarts, the wall time."""
    tmp = Path(tempfile.mkdtemp())
    pool = ProcessPool(1, plugins=PLUGINS, python_path=(str(REPO),))
    await pool.start()
    peaks: dict[str, list[float]] = {}
    start = time.perf_counter()
    try:
        for n, (label, (task_type, settings)) in enumerate(jobs):
            spec = make_spec(tmp, label, task_type, range(n * 5, n * 5 + 5), settings)
            worker = await pool.checkout((spec.run, spec.task), ())
            result = await run_chunk(
                worker,
                spec,
                Ledger(spec.units),
                limit_gb=LIMIT_GB,
                is_stale=_never,
                stopping=lambda: False,
            )
            await pool.checkin(worker)
            peaks.setdefault(label, []).append(result.peak_gb * 1024)
        wall = time.perf_counter() - start
    finally:
        await pool.close()
    return peaks, pool.replaced, wall


def span(values: list[float]) -> str:
    return f"{min(values):.1f}/{statistics.median(values):.1f}/{max(values):.1f}"


async def main(rounds: int) -> None:
    print(
        f"one process, {rounds} jobs of each task alternating, 5 units a job, limit {LIMIT_GB} "
        f"GiB; a switch keeping more than {RECYCLE_KEPT_GB * 1024:.0f} MiB restarts the process"
    )
    print("peaks per process in MiB as min/median/max")
    for name, a, b in CASES:
        alone, _, _ = await alternate([("B", b)] * rounds)
        peaks, restarts, wall = await alternate([("A", a), ("B", b)] * rounds)
        print(
            f"{name:<28} B alone {span(alone['B'])}  B alternating {span(peaks['B'])} "
            f"(x{statistics.median(peaks['B']) / statistics.median(alone['B']):.2f})  "
            f"A {span(peaks['A'])}  restarts {restarts}  {wall / (2 * rounds) * 1000:.0f} ms/job"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="jobs of each task")
    asyncio.run(main(parser.parse_args().rounds))
