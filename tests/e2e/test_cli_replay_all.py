"""`simrun replay RUN --task T --all` through the real command, on the store of a finished
`simrun run`: a succeeded task runs again, done units included, and so do the tasks that
read it (issue 14, a rough edge)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_harness import WORK, run_id_in, simrun, write_work
from tests.support.units import calls, done_units

pytestmark = pytest.mark.e2e


def test_replay_all_reruns_every_unit_of_a_succeeded_task(tmp_path: Path) -> None:
    """After a run that succeeded, `replay RUN --store S --task work --all` computes every
    unit of `work` once more (the done ones too, into an emptied output directory), the run
    succeeds again and exits 0;
    without --all the same run has nothing to replay and the message points to --all."""
    write_work(tmp_path / "wf.yaml", units=5)
    first = simrun("run", "wf.yaml", "--plugins", WORK, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    run_id = run_id_in(first.stdout)
    out = tmp_path / "simrun-store" / "runs" / run_id / "work" / "out"
    assert calls(out) == dict.fromkeys(range(5), 1)
    store = ("--store", "simrun-store", "--plugins", WORK)

    nothing = simrun("replay", run_id, *store, cwd=tmp_path)
    assert nothing.returncode != 0
    assert "--task TASK --all" in nothing.stderr

    again = simrun("replay", run_id, *store, "--task", "work", "--all", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"run {run_id}: task 'work' runs again, all of its units (5 units before)" in (
        again.stdout
    )
    assert f"run {run_id} succeeded" in again.stdout
    # its outputs were removed before it ran again: each unit's call log starts anew
    assert calls(out) == dict.fromkeys(range(5), 1)
    assert done_units(out) == set(range(5))


def summary_reports(run_dir: Path) -> int:
    """How often the demo's `summary` command ran (one report of simrun-exec each)."""
    return len(list((run_dir / "summary" / "logs").glob("attempt-*.report.json")))


def test_replay_all_reruns_the_tasks_downstream_and_only_those(tmp_path: Path) -> None:
    """On the demo's store: `--task sweep --all` runs `sweep` (every unit, its merge) and
    `summary`, which reads it, again; `--task summary --all` runs `summary` alone, `sweep`'s
    outputs untouched. `--all` without `--task` is a usage error."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    first = simrun("run", "examples/heat.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    run_id = run_id_in(first.stdout)
    run_dir = tmp_path / "simrun-store" / "runs" / run_id
    points = sorted((run_dir / "sweep" / "out").glob("point-*.json"))
    assert len(points) == 24
    before = {p: p.stat().st_mtime_ns for p in points}
    assert summary_reports(run_dir) == 1

    both = simrun("replay", run_id, "--store", "simrun-store", "--task", "sweep", "--all",
                  cwd=tmp_path)  # fmt: skip
    assert both.returncode == 0, both.stdout + both.stderr
    assert (
        "task 'sweep' runs again, all of its units, and 1 task reading it: 'summary' "
        "(25 units before in all)"
    ) in both.stdout
    assert f"run {run_id} succeeded" in both.stdout
    assert all(p.stat().st_mtime_ns > before[p] for p in points)
    assert summary_reports(run_dir) == 2

    between = {p: p.stat().st_mtime_ns for p in points}
    alone = simrun("replay", run_id, "--store", "simrun-store", "--task", "summary", "--all",
                   cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "task 'summary' runs again, all of its units (1 unit before)" in alone.stdout
    assert {p: p.stat().st_mtime_ns for p in points} == between
    assert summary_reports(run_dir) == 3

    bad = simrun("replay", run_id, "--store", "simrun-store", "--all", cwd=tmp_path)
    assert bad.returncode == 2
    assert "--all needs --task" in bad.stderr
