"""`simrun.run_local` and interrupted runs of its store, through a real Python process:
it says which it leaves alone (as `simrun run` does) and goes on with one only when given
``resume=``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_harness import (
    WORK,
    clean_env,
    run_id_in,
    start_simrun,
    wait_for_a_done_unit,
    wait_for_the_guard,
    write_work,
)
from tests.support.units import calls, done_units

pytestmark = pytest.mark.e2e

SCRIPT = """
import sys, simrun
kwargs = dict(plugins=[{work!r}], processes=1, progress=False)
if sys.argv[1] == "resume":
    result = simrun.run_local(resume=sys.argv[2], **kwargs)
else:
    result = simrun.run_local(sys.argv[2], **kwargs)
print("RESULT", result.id, result.state, result.task("work").count("done"))
"""


def python(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "api.py"
    script.write_text(SCRIPT.format(work=WORK))
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, env=clean_env(),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def kill_midway(tmp_path: Path) -> tuple[str, Path]:
    """A `simrun run` of 12 slow units SIGKILLed after its first done unit: its run id
    and the task's output directory."""
    write_work(tmp_path / "slow.yaml", name="slow", units=12, seconds=0.3)
    proc = start_simrun("run", "slow.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    wait_for_a_done_unit(proc, tmp_path / "simrun-store")
    proc.kill()
    output, _ = proc.communicate(timeout=10)
    run_id = run_id_in(output)
    return run_id, tmp_path / "simrun-store" / "runs" / run_id / "work" / "out"


def test_run_local_names_an_interrupted_run_leaves_it_and_resumes_it_when_asked(
    tmp_path: Path,
) -> None:
    """After a `simrun run` was killed midway, `run_local` of another workflow on the same
    store warns that the run was interrupted and is left alone (with the commands that go
    on with it or drop it) and computes none of its units; `run_local(resume=RUN)` then
    finishes that run, computing each unit left once (the one the kill cut short aside)."""
    old, out = kill_midway(tmp_path)
    wait_for_the_guard(tmp_path / "simrun-store")
    before = done_units(out)
    assert 0 < len(before) < 12

    write_work(tmp_path / "quick.yaml", name="quick", units=2)
    other = python(tmp_path, "run", "quick.yaml")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "succeeded 2" in other.stdout, other.stdout
    assert "InterruptedRuns" in other.stderr, other.stderr
    assert f"run {old} of this store was interrupted" in other.stderr
    assert f"simrun run --resume {old}" in other.stderr
    assert done_units(out) == before, "the interrupted run went on"

    resumed = python(tmp_path, "resume", old)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"RESULT {old} succeeded 12" in resumed.stdout, resumed.stdout + resumed.stderr
    assert "InterruptedRuns" not in resumed.stderr
    assert done_units(out) == set(range(12))
    # each unit left ran once (the one the kill cut short may have run twice)
    left = [n for i, n in calls(out).items() if i not in before]
    assert sum(left) <= len(left) + 1, calls(out)
