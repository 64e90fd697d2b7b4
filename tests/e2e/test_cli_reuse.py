"""Reuse of unchanged work through the real ``simrun run`` (issue 14, item 3): the demo run
twice in one directory reuses both tasks the second time and says so in the forecast, the
progress and the summary; editing one setting runs that task and what depends on it;
``--rerun`` and ``--no-reuse`` force work."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_harness import run_id_in, simrun

pytestmark = pytest.mark.e2e

TITLE = "Heat sweep of a plate with a heater and a cooling pipe"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return result.stdout


def ran(output: str) -> set[str]:
    """The tasks whose units ran, from the progress lines (``summary: done (1/1 units)``)."""
    return set(re.findall(r"\] (\w+): done \(\d+/\d+ units\)", output))


def reused(output: str) -> dict[str, str]:
    """The tasks the progress says were reused, with their run."""
    return dict(re.findall(r"\] (\w+): reused from (\S+)", output))


def test_the_demo_run_twice_reuses_its_work_and_an_edit_runs_what_it_touches(
    tmp_path: Path,
) -> None:
    """The second run of the demo in one directory reuses both tasks from the first, says
    so in the dry run's plan (the forecast has nothing to run), the progress and the
    summary, and dispatches no unit. A new summary title in the file runs the summary
    only; a new sweep setting runs both; --rerun sweep and --no-reuse run both."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    first = ok(simrun("run", "examples/heat.yaml", cwd=tmp_path))
    first_id = run_id_in(first)
    assert ran(first) == {"sweep", "summary"}

    dry = ok(simrun("run", "examples/heat.yaml", "--dry-run", cwd=tmp_path))
    assert f"reused: sweep (from {first_id}), summary (from {first_id})" in dry
    assert "forecast: nothing to run" in dry

    started = time.monotonic()
    second = ok(simrun("run", "examples/heat.yaml", cwd=tmp_path))
    took = time.monotonic() - started
    second_id = run_id_in(second)
    assert reused(second) == {"sweep": first_id, "summary": first_id}
    assert ran(second) == set()
    table = second.split("submitted")[1]
    assert table.count(f"reused from {first_id}") >= 2  # progress and summary
    assert took < 30
    report = tmp_path / "simrun-store" / "runs" / second_id / "summary" / "out" / "report.md"
    assert TITLE in report.read_text()
    status = ok(simrun("status", second_id, cwd=tmp_path))
    assert f"reused from {first_id}" in status

    workflow = tmp_path / "examples" / "heat.yaml"
    workflow.write_text(workflow.read_text().replace(TITLE, "A new title"))
    titled = ok(simrun("run", "examples/heat.yaml", cwd=tmp_path))
    assert reused(titled) == {"sweep": second_id}
    assert ran(titled) == {"summary"}

    swept = ok(simrun("run", "examples/heat.yaml", "--set", "sweep.duration=0.2", cwd=tmp_path))
    assert reused(swept) == {}
    assert ran(swept) == {"sweep", "summary"}

    rerun = ok(simrun("run", "examples/heat.yaml", "--rerun", "sweep", cwd=tmp_path))
    assert reused(rerun) == {}
    assert ran(rerun) == {"sweep", "summary"}

    forced = ok(simrun("run", "examples/heat.yaml", "--no-reuse", cwd=tmp_path))
    assert reused(forced) == {}
    assert ran(forced) == {"sweep", "summary"}


def test_rerun_of_a_task_that_is_not_there_is_refused(tmp_path: Path) -> None:
    """--rerun naming no task of the workflow fails before anything starts, naming it and
    the tasks, without a traceback."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    result = simrun("run", "examples/heat.yaml", "--rerun", "swep", cwd=tmp_path)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "--rerun 'swep': no such task (the tasks: sweep, summary)" in text
    assert "Traceback" not in text
    assert not (tmp_path / "simrun-store" / "runs").exists()


PARTS = ("--plugins", "tests.support.service_tasks:PARTS", "--processes", "2")


def parts_workflow(path: Path, units: int) -> None:
    path.write_text(f"tasks:\n  - {{name: mc, type: svc-parts, settings: {{units: {units}}}}}\n")


def test_more_units_of_a_type_with_unit_outputs_run_only_the_new_units(tmp_path: Path) -> None:
    """A type that declares its units' outputs per index (`UnitOutputs`): after a run of 4
    units, one of 6 takes the first 4 (the dry run plans 2 and says "4 units reused from
    RUN", the progress and summary too), computes only units 4 and 5, and merges all 6.
    A unit whose file was deleted since runs again in the next run, with the new one."""
    wf = tmp_path / "wf.yaml"
    parts_workflow(wf, 4)
    first_id = run_id_in(ok(simrun("run", "wf.yaml", *PARTS, cwd=tmp_path)))
    parts_workflow(wf, 6)
    text = f"4 units reused from {first_id}"
    dry = ok(simrun("run", "wf.yaml", "--dry-run", *PARTS, cwd=tmp_path))
    assert f"units reused: mc ({text})" in dry
    assert "2 (+4 reused)" in dry
    second = ok(simrun("run", "wf.yaml", *PARTS, cwd=tmp_path))
    second_id = run_id_in(second)
    assert second.split("submitted")[1].count(text) >= 2  # progress and summary
    out = tmp_path / "simrun-store" / "runs" / second_id / "mc" / "out"
    assert sorted(p.name for p in out.glob("calls-*.log")) == ["calls-4.log", "calls-5.log"]
    assert sorted(p.name for p in out.glob("unit-*.json")) == [f"unit-{i}.json" for i in range(6)]
    assert (out / "merged.json").read_text() == "[0, 1, 2, 3, 4, 5]"
    status = ok(simrun("status", second_id, cwd=tmp_path))
    assert text in status
    # A unit whose file is gone runs again with the new ones: a gap below the frontier.
    (out / "unit-2.json").unlink()
    parts_workflow(wf, 7)
    third_id = run_id_in(ok(simrun("run", "wf.yaml", *PARTS, cwd=tmp_path)))
    out = tmp_path / "simrun-store" / "runs" / third_id / "mc" / "out"
    assert sorted(p.name for p in out.glob("calls-*.log")) == ["calls-2.log", "calls-6.log"]
    assert (out / "merged.json").read_text() == "[0, 1, 2, 3, 4, 5, 6]"
