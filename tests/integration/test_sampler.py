"""MemorySampler and anon_memory_bytes against real child processes (no Redis, no service)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from simrun.core.sizing import GIB
from simrun.worker.proctree import anon_memory_bytes, descendants
from simrun.worker.sampler import MemorySampler
from tests.support.wait import wait_until

MIB = 2**20

# A child that follows commands on stdin: "alloc N" keeps N MiB of written anonymous memory,
# "free" drops it, "map PATH" maps and reads a file (file-backed memory), "spawn K N" starts
# K children holding N MiB each, "exit" ends. It answers "ok" after each command.
CHILD = r"""
import mmap, subprocess, sys
held = []
kids = []
HOLD = "import sys; x = b'\\x01' * ({n} * 2**20); print('ok', flush=True); sys.stdin.read()"
print("ok", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "alloc":
        held.append(b"\x01" * (int(cmd[1]) * 2**20))
    elif cmd[0] == "free":
        held.clear()
    elif cmd[0] == "map":
        f = open(cmd[1], "rb")
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        total = sum(m[i] for i in range(0, len(m), 4096))
        held.append(m)
    elif cmd[0] == "spawn":
        for _ in range(int(cmd[1])):
            p = subprocess.Popen([sys.executable, "-c", HOLD.format(n=int(cmd[2]))],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            p.stdout.readline()
            kids.append(p)
    elif cmd[0] == "exit":
        break
    print("ok", flush=True)
for p in kids:
    p.stdin.close()
    p.wait()
"""


class Child:
    """A real process we can make allocate memory on demand."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.expect_ok()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect_ok(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ok", f"child said {line!r}"

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.expect_ok()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("exit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def child() -> Iterator[Child]:
    c = Child()
    try:
        yield c
    finally:
        c.close()


def wait_samples(sampler: MemorySampler, more: int = 2, timeout_s: float = 10.0) -> None:
    """Wait until the sampler took ``more`` further readings (robust on a busy machine)."""
    target = sampler.samples + more
    wait_until(
        lambda: sampler.samples >= target,
        timeout_s=timeout_s,
        what=f"{more} readings of the sampler thread",
        poll_s=0.002,
    )


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_anon_memory_counts_written_memory(child: Child) -> None:
    """Memory a process writes shows up in its anonymous memory, and leaves it when freed."""
    before = anon_memory_bytes(child.pid)
    assert before is not None
    assert before > 0
    child.send("alloc 100")
    during = anon_memory_bytes(child.pid)
    assert during is not None
    assert during - before >= 95 * MIB
    child.send("free")
    after = anon_memory_bytes(child.pid)
    assert after is not None
    assert after < during - 80 * MIB


def test_file_backed_memory_is_not_anonymous(child: Child, tmp_path: Path) -> None:
    """Pages of a mapped file are resident but not anonymous, so they are not counted."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(64 * MIB))
    before = anon_memory_bytes(child.pid)
    child.send(f"map {data}")
    after = anon_memory_bytes(child.pid)
    assert before is not None
    assert after is not None
    assert after - before < 16 * MIB


def test_gone_process_reads_as_none() -> None:
    """A pid that no longer exists reads as None, with or without its children."""
    pid = dead_pid()
    assert anon_memory_bytes(pid) is None
    assert anon_memory_bytes(pid, include_children=True) is None


def test_children_are_counted_only_when_asked(child: Child) -> None:
    """include_children adds the anonymous memory of every descendant."""
    child.send("spawn 3 40")
    alone = anon_memory_bytes(child.pid)
    tree = anon_memory_bytes(child.pid, include_children=True)
    assert alone is not None
    assert tree is not None
    assert tree - alone >= 3 * 38 * MIB
    assert alone < 60 * MIB


@pytest.mark.parametrize("children_files", [True, False])
def test_descendants_by_either_method(child: Child, children_files: bool) -> None:
    """Both ways of finding a tree (children files, parent-id scan) find the same processes."""
    if children_files and not Path("/proc/thread-self/children").exists():
        pytest.skip("this kernel has no /proc/<pid>/task/<tid>/children files")
    child.send("spawn 2 1")
    found = descendants(child.pid, children_files=children_files)
    assert len(found) == 2
    assert sorted(found) == sorted(descendants(child.pid, children_files=not children_files))
    assert child.pid not in found


def test_sampler_keeps_the_peak_after_memory_is_freed(child: Child) -> None:
    """The peak is the highest reading, not the last one."""
    with MemorySampler(child.pid, interval_s=0.005) as sampler:
        child.send("alloc 150")
        wait_samples(sampler)
        child.send("free")
        wait_samples(sampler)
    assert sampler.peak_gb >= 145 * MIB / GIB
    current = anon_memory_bytes(child.pid)
    assert current is not None
    assert current / GIB < sampler.peak_gb - 100 * MIB / GIB
    assert sampler.samples >= 3


def test_stop_returns_the_peak_and_takes_a_last_sample(child: Child) -> None:
    """stop() samples once more, so memory reached just before it counts."""
    sampler = MemorySampler(child.pid, interval_s=60).start()
    # the first sample is taken; the next would be in a minute
    wait_until(lambda: sampler.samples, timeout_s=10, what="the first sample", poll_s=0.002)
    child.send("alloc 80")
    peak = sampler.stop()
    assert peak == sampler.peak_gb
    assert peak >= 78 * MIB / GIB
    assert sampler.samples == 2


def test_limit_calls_back_once_from_the_sampler_thread(child: Child) -> None:
    """Passing limit_gb sets exceeded and calls on_limit once, in the sampling thread."""
    calls: list[tuple[float, str]] = []
    sampler = MemorySampler(
        child.pid,
        interval_s=0.005,
        limit_gb=60 * MIB / GIB,
        on_limit=lambda gb: calls.append((gb, threading.current_thread().name)),
    ).start()
    child.send("alloc 100")
    wait_samples(sampler)
    child.send("alloc 20")
    wait_samples(sampler)
    sampler.stop()
    assert sampler.exceeded
    assert len(calls) == 1
    gb, thread_name = calls[0]
    assert gb > 60 * MIB / GIB
    assert thread_name == f"memory-sampler-{child.pid}"


def test_limit_not_passed_means_no_callback(child: Child) -> None:
    """Below the limit nothing is called and exceeded stays False."""
    calls: list[float] = []
    with MemorySampler(child.pid, interval_s=0.005, limit_gb=1.0, on_limit=calls.append) as sampler:
        child.send("alloc 20")
        wait_samples(sampler)
    assert not sampler.exceeded
    assert calls == []


def test_killing_in_on_limit_ends_the_sampler(child: Child) -> None:
    """A callback may kill the process; the thread then ends by itself and stop() is fine."""
    sampler = MemorySampler(
        child.pid,
        interval_s=0.005,
        limit_gb=50 * MIB / GIB,
        on_limit=lambda _gb: child.proc.kill(),
    ).start()
    assert child.proc.stdin is not None
    child.proc.stdin.write("alloc 100\n")
    child.proc.stdin.flush()
    child.proc.wait(timeout=10)
    thread = sampler._thread
    assert thread is not None
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert sampler.stop() >= 50 * MIB / GIB
    assert sampler.exceeded


def test_failing_callback_is_logged_and_sampling_goes_on(
    child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in on_limit is logged; the sampler keeps measuring."""

    def boom(_gb: float) -> None:
        raise RuntimeError("callback failed")

    with caplog.at_level(logging.ERROR, logger="simrun.worker.sampler"):
        sampler = MemorySampler(
            child.pid, interval_s=0.005, limit_gb=30 * MIB / GIB, on_limit=boom
        ).start()
        child.send("alloc 40")
        wait_samples(sampler)
        child.send("alloc 60")
        wait_samples(sampler)
        sampler.stop()
    assert sampler.exceeded
    assert sampler.peak_gb >= 95 * MIB / GIB
    assert any("callback failed" in (r.exc_text or "") for r in caplog.records)


def test_reset_peak_starts_from_current_memory(child: Child) -> None:
    """After reset_peak the peak is what the process holds now, not the earlier high."""
    with MemorySampler(child.pid, interval_s=0.005) as sampler:
        child.send("alloc 120")
        wait_samples(sampler)
        child.send("free")
        sampler.reset_peak()
        after_reset = sampler.peak_gb
        child.send("alloc 30")
        wait_samples(sampler)
    assert after_reset < 60 * MIB / GIB
    assert 28 * MIB / GIB <= sampler.peak_gb < 100 * MIB / GIB


def test_process_exiting_mid_sampling_is_survived() -> None:
    """A process that exits while sampled ends the thread quietly; the peak stays."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; x = b'1' * (50 * 2**20); time.sleep(0.2)"]
    )
    sampler = MemorySampler(proc.pid, interval_s=0.002, include_children=True).start()
    proc.wait(timeout=10)
    assert sampler._thread is not None
    sampler._thread.join(timeout=5)
    assert not sampler._thread.is_alive()
    assert sampler.stop() >= 45 * MIB / GIB


def test_tree_with_children_coming_and_going_is_survived() -> None:
    """Children that start and exit all the time never break a tree sampler."""
    script = (
        "import subprocess, sys, time\n"
        "end = time.monotonic() + 0.6\n"
        "while time.monotonic() < end:\n"
        "    subprocess.run(['true'])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    sampler = MemorySampler(proc.pid, interval_s=0.001, include_children=True).start()
    proc.wait(timeout=20)
    peak = sampler.stop()
    assert sampler.samples > 20
    assert peak > 0
    assert sampler._thread is not None
    assert not sampler._thread.is_alive()


def test_sampler_of_a_gone_process_reads_zero() -> None:
    """Sampling a pid that is already gone gives a peak of 0 and no error."""
    sampler = MemorySampler(dead_pid()).start()
    assert sampler.stop() == 0.0
    assert sampler.samples == 0


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"interval_s": 0}, "interval_s"),
        ({"interval_s": -1.0}, "interval_s"),
        ({"limit_gb": 0}, "limit_gb"),
        ({"limit_gb": -2.0}, "limit_gb"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, float], word: str) -> None:
    """A bad interval or limit is refused with an error naming it."""
    with pytest.raises(ValueError, match=word):
        MemorySampler(os.getpid(), **kwargs)  # type: ignore[arg-type]


def test_started_twice_is_refused() -> None:
    """A sampler runs one thread; starting it again is an error."""
    sampler = MemorySampler(os.getpid(), interval_s=0.01).start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            sampler.start()
    finally:
        sampler.stop()


def test_cpu_seconds_are_known_after_stop() -> None:
    """The sampling thread's own CPU time is available once it ended."""
    sampler = MemorySampler(os.getpid(), interval_s=0.001).start()
    wait_samples(sampler, 20)
    sampler.stop()
    assert 0 < sampler.cpu_s < 0.1
