"""CPU cost of simrun's MemorySampler, against peers measured in the same run.

    python benchmarks/sampler.py [--seconds 5] [--interval-s 0.02] [--tree 10]

Two figures per case:
- the CPU seconds the sampling thread used per second of wall time, with a real
  `MemorySampler` following a real process (one process; a tree of ``--tree`` processes);
- the cost of one reading, in microseconds, from a tight loop.

Peers: an idle thread that only wakes every interval (the floor any sampler pays), and a
reader of ``/proc/<pid>/smaps_rollup`` (the other place the kernel gives anonymous memory).
For the tree, the parent-id scan of all of /proc (the fallback for kernels without
``children`` files) is measured beside the walk of the ``children`` files.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from simrun.worker.proctree import CHILDREN_FILES, descendants, own_anon_bytes
from simrun.worker.sampler import MemorySampler

HOLD = "import sys; x = b'1' * (20 * 2**20); sys.stdin.read()"
TREE = (
    "import subprocess, sys\n"
    "kids = [subprocess.Popen([sys.executable, '-c', {hold!r}], stdin=subprocess.PIPE)"
    " for _ in range({n})]\n"
    "sys.stdin.read()\n"
    "for k in kids:\n"
    "    k.stdin.close(); k.wait()\n"
)


def start_single() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE)


def start_tree(size: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE.format(hold=HOLD, n=size - 1)], stdin=subprocess.PIPE
    )
    deadline = time.monotonic() + 30
    while len(descendants(proc.pid)) < size - 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tree of {size} processes did not start within 30 s")
        time.sleep(0.05)
    return proc


def end(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def thread_cpu_fraction(pid: int, tree: bool, seconds: float, interval_s: float) -> float:
    """CPU seconds of a real sampler's thread per wall second."""
    sampler = MemorySampler(pid, interval_s=interval_s, include_children=tree).start()
    time.sleep(seconds)
    sampler.stop()
    return sampler.cpu_s / seconds


def idle_thread_fraction(seconds: float, interval_s: float) -> float:
    """The floor: a thread that wakes every interval and does nothing."""
    stop = threading.Event()
    used: list[float] = []

    def run() -> None:
        while not stop.wait(interval_s):
            pass
        used.append(time.thread_time())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return used[0] / seconds


def smaps_rollup_anon(pid: int) -> int:
    """A peer reading: ``Anonymous:`` of smaps_rollup, through ordinary text I/O."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Anonymous: line in /proc/{pid}/smaps_rollup")


def per_call_us(fn: Callable[[], object], min_s: float = 0.5) -> float:
    calls = 0
    start = time.perf_counter()
    while True:
        for _ in range(50):
            fn()
        calls += 50
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            return elapsed / calls * 1e6


def tree_reading(pid: int, children_files: bool) -> Callable[[], int]:
    def read() -> int:
        pids = [pid, *descendants(pid, children_files=children_files)]
        return sum(own_anon_bytes(p) or 0 for p in pids)

    return read


def tree_smaps(pid: int) -> Callable[[], int]:
    def read() -> int:
        return sum(smaps_rollup_anon(p) for p in [pid, *descendants(pid)])

    return read


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="wall time per case")
    parser.add_argument("--interval-s", type=float, default=0.02)
    parser.add_argument("--tree", type=int, default=10, help="processes in the tree case")
    args = parser.parse_args(argv)
    procs = os.listdir("/proc")
    print(
        f"interval {args.interval_s * 1000:g} ms, {args.seconds:g} s per case, "
        f"{sum(p.isdigit() for p in procs)} processes on the machine, "
        f"children files: {'yes' if CHILDREN_FILES else 'no'}, {os.cpu_count()} CPUs"
    )
    single = start_single()
    tree = start_tree(args.tree)
    try:
        idle = idle_thread_fraction(args.seconds, args.interval_s)
        one = thread_cpu_fraction(single.pid, False, args.seconds, args.interval_s)
        many = thread_cpu_fraction(tree.pid, True, args.seconds, args.interval_s)
        rows = [
            ("single: RssAnon of status", per_call_us(lambda: own_anon_bytes(single.pid))),
            ("single: smaps_rollup (peer)", per_call_us(lambda: smaps_rollup_anon(single.pid))),
            (
                f"tree {args.tree}: children files",
                per_call_us(tree_reading(tree.pid, True)) if CHILDREN_FILES else float("nan"),
            ),
            (
                f"tree {args.tree}: /proc scan (fallback)",
                per_call_us(tree_reading(tree.pid, False)),
            ),
            (f"tree {args.tree}: smaps_rollup (peer)", per_call_us(tree_smaps(tree.pid))),
        ]
    finally:
        end(single)
        end(tree)

    print()
    print("sampling thread, CPU s per wall s (real MemorySampler)")
    print(f"  {'idle thread waking each interval (floor)':<44} {idle * 100:8.3f} %")
    print(f"  {'MemorySampler, single process':<44} {one * 100:8.3f} %")
    print(f"  {f'MemorySampler, tree of {args.tree} processes':<44} {many * 100:8.3f} %")
    print(f"  ratio single / floor: {one / idle:.1f}x   tree / single: {many / one:.1f}x")
    print()
    print("one reading, microseconds (tight loop)")
    for name, us in rows:
        print(f"  {name:<44} {us:8.1f} us")
    print(
        f"  ratio smaps_rollup / status (single): {rows[1][1] / rows[0][1]:.1f}x   "
        f"/proc scan / children files (tree): {rows[3][1] / rows[2][1]:.1f}x"
    )


if __name__ == "__main__":
    main()
