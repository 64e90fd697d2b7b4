"""simrun.worker.cgroups against the real kernel: a process under a real memory limit is
killed by the kernel's OOM killer and the counter says so; cgroups are removed with what
they hold; a dead worker's are swept. Skipped, saying why, where this process cannot make
memory cgroups (no v1 memory controller, no delegated v2)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from simrun.worker.cgroups import Cgroup, WorkerCgroups, detect, parse_limit
from simrun.worker.pool.processes import join_then_exec

SUPPORT = detect()
pytestmark = pytest.mark.skipif(
    not SUPPORT.usable, reason=f"no memory cgroups for this process: {SUPPORT.reason}"
)
MIB = 2**20
HOG = "b = bytearray({mb} * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('held')"


@pytest.fixture
def cgroups() -> Iterator[WorkerCgroups]:
    assert SUPPORT.own is not None
    made = WorkerCgroups.open(SUPPORT.own)
    yield made
    made.close()
    assert not made.area.path.exists()


def test_the_kernel_kills_a_process_past_its_cgroups_limit(cgroups: WorkerCgroups) -> None:
    """A process started inside a cgroup limited to 64 MiB that writes 256 MiB is SIGKILLed
    by the kernel, and the cgroup's OOM kill counter goes up by one."""
    box = cgroups.new_box()
    box.set_limit(64 * MIB)
    assert parse_limit(box.limit_file.read_text()) == 64 * MIB
    before = box.oom_kills()
    assert before == 0
    argv = join_then_exec(box, [sys.executable, "-c", HOG.format(mb=256)])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -9, done
    assert "held" not in done.stdout
    assert box.oom_kills() == 1


def test_a_process_within_its_limit_is_not_killed(cgroups: WorkerCgroups) -> None:
    """The same process writing 16 MiB under the 64 MiB limit ends normally, no OOM kill."""
    box = cgroups.new_box()
    box.set_limit(64 * MIB)
    argv = join_then_exec(box, [sys.executable, "-c", HOG.format(mb=16)])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "held")
    assert box.oom_kills() == 0


def test_removing_a_cgroup_ends_what_escaped_into_a_new_session(cgroups: WorkerCgroups) -> None:
    """A process of a cgroup in a session of its own, whose parent is gone, is still in the
    cgroup; removing the cgroup kills it, and the directory is gone."""
    box = cgroups.new_box()
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " start_new_session=True, stdout=subprocess.DEVNULL,"
        " stderr=subprocess.DEVNULL)\n"
        "print(p.pid)\n"
    )
    argv = join_then_exec(box, [sys.executable, "-c", script])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    orphan = int(done.stdout)
    assert box.procs() == [orphan]
    assert box.remove()
    assert not box.path.exists()
    with open(f"/proc/{orphan}/stat") as fh:  # a zombie until init reaps it, at most
        assert fh.read().split(") ")[1][0] == "Z"


def test_the_areas_of_dead_workers_are_swept(cgroups: WorkerCgroups) -> None:
    """An area named after a process that is gone (its start time differs) is removed with
    its empty boxes at the next start; the area of a living worker is left alone."""
    assert SUPPORT.own is not None
    dead = SUPPORT.own.path / f"simrun-w{os.getpid()}-1"
    (dead / "p1").mkdir(parents=True)
    again = WorkerCgroups.open(SUPPORT.own)
    try:
        assert not dead.exists()
        assert cgroups.area.path.exists()  # ours: alive, same start time
        assert again.area.path == cgroups.area.path
    finally:
        Cgroup(dead, SUPPORT.own.version).remove()
