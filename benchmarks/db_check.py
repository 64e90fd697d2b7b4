"""The cost of checking a store's SQLite file: ``PRAGMA quick_check`` (what every process
runs at its first opening of the file, within `simrun.db.QUICK_CHECK_BUDGET_S`) and
``PRAGMA integrity_check`` (``simrun store check``), on files of many runs.

    python benchmarks/db_check.py [--runs 1000 10000] [--rounds 3]

Each store has the real schema; a run is a 3 KB document, 5 tasks, 20 unit rows of each
(errors kept), 100 spans of each, and 50 observations. The figures are the best of
``--rounds`` of each check, the file warm in the page cache, and its milliseconds per MB.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from simrun.resources.store import MIGRATIONS as RESOURCE_MIGRATIONS
from simrun.runstore.schema import MIGRATIONS as RUN_MIGRATIONS

DOC = "tasks:\n" + "  - name: t\n    type: heat\n    settings: {n: 100}\n" * 40


def _insert_run(conn: sqlite3.Connection, number: int) -> None:
    run = f"20261202-{number:06d}-abcdef"
    conn.execute(
        "INSERT INTO runs (id, name, model, state, document, created_s, updated_s)"
        " VALUES (?, 'campaign', 'm', 'succeeded', ?, ?, ?)",
        (run, DOC, number, number),
    )
    for t in range(5):
        task = f"t{t}"
        conn.execute(
            "INSERT INTO tasks (run_id, name, position, type, settings, inputs, depends,"
            " splittable, has_merge, state, units, fingerprint)"
            " VALUES (?, ?, ?, 'heat', '{\"n\": 100}', '{}', '[]', 1, 0, 'done', 10000, ?)",
            (run, task, t, f"fp{number}-{t}"),
        )
        conn.executemany(
            "INSERT INTO units (run_id, task, idx, kind, state, error, errors, finished_s)"
            " VALUES (?, ?, ?, 'chunk', 'done', ?, 1, 1.0)",
            [(run, task, i, "Traceback: boom " * 5) for i in range(20)],
        )
        conn.executemany(
            "INSERT INTO spans (run_id, task, first_idx, last_idx, attempt, job_id, memory_gb,"
            " worker, queued_s, started_s, finished_s)"
            " VALUES (?, ?, ?, ?, 1, ?, 1.5, 'worker-abc', 1.0, 2.0, 3.0)",
            [(run, task, i * 100, i * 100 + 99, f"{run}:{task}:{i}") for i in range(100)],
        )
    conn.executemany(
        "INSERT INTO observations (key, run, memory_gb, oom, seconds_per_unit, units, base_gb,"
        " limit_gb, recorded_s, input_bytes) VALUES (?, ?, ?, 0, 0.1, 100, 0.1, 2.0, ?, 1000)",
        [(f"heat//k{number % 50}", run, random.random(), number) for _ in range(50)],
    )


def make_store(path: Path, runs: int) -> None:
    """A store's file of ``runs`` runs, checkpointed."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    for step in (*RUN_MIGRATIONS, *RESOURCE_MIGRATIONS):
        for statement in step.statements:
            conn.execute(statement)
    for number in range(runs):
        _insert_run(conn, number)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def best_s(path: Path, pragma: str, rounds: int) -> float:
    """The shortest time of ``PRAGMA pragma`` over ``rounds``, in a new connection each."""
    times = []
    for _ in range(rounds):
        conn = sqlite3.connect(path)
        began = time.perf_counter()
        found = conn.execute(f"PRAGMA {pragma}").fetchall()
        times.append(time.perf_counter() - began)
        conn.close()
        assert found == [("ok",)], found
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks/db_check.py")
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for runs in args.runs:
            path = Path(tmp) / f"runs-{runs}.db"
            make_store(path, runs)
            mb = path.stat().st_size / 1e6
            for pragma in ("quick_check", "integrity_check"):
                took = best_s(path, pragma, args.rounds)
                print(
                    f"{runs:>6} runs {mb:>7.1f} MB  {pragma:<16} {took * 1000:>7.0f} ms"
                    f"  {took * 1000 / mb:.2f} ms/MB"
                )
            path.unlink()


if __name__ == "__main__":
    main()
