"""`simrun replay RUN --task T --all` through the real command: the outputs of the tasks it
runs again are removed before they run, so an earlier file is never taken for a new one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_harness import run_id_in, simrun

pytestmark = pytest.mark.e2e


def test_replay_all_removes_the_outputs_of_the_tasks_it_runs_again(tmp_path: Path) -> None:
    """On the demo's store (sweep, then summary reading it): a file left in the output
    directories (as an earlier attempt would leave one; planted here) is gone from those of
    `summary` alone after `--task summary --all`, `sweep`'s kept; after `--task sweep
    --all` it is gone from both, and both tasks' outputs are there, written anew."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    first = simrun("run", "examples/heat.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    run_id = run_id_in(first.stdout)
    run_dir = tmp_path / "simrun-store" / "runs" / run_id
    stale = {name: run_dir / name / "out" / "stale.txt" for name in ("sweep", "summary")}
    for path in stale.values():
        path.write_text("from an earlier attempt\n")
    summary_files = sorted(p.name for p in (run_dir / "summary" / "out").iterdir())
    store = ("--store", "simrun-store")

    alone = simrun("replay", run_id, *store, "--task", "summary", "--all", cwd=tmp_path)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert not stale["summary"].exists()
    assert stale["sweep"].exists()
    assert sorted(p.name for p in (run_dir / "summary" / "out").iterdir()) == [
        n for n in summary_files if n != "stale.txt"
    ]

    stale["summary"].write_text("from an earlier attempt\n")
    both = simrun("replay", run_id, *store, "--task", "sweep", "--all", cwd=tmp_path)
    assert both.returncode == 0, both.stdout + both.stderr
    assert f"run {run_id} succeeded" in both.stdout
    assert not stale["sweep"].exists()
    assert not stale["summary"].exists()
    assert len(list((run_dir / "sweep" / "out").glob("point-*.json"))) == 24
    assert any((run_dir / "summary" / "out").iterdir())
