"""What units print through `simrun run`: in each unit's log, one line per unit in the
worker's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_harness import WORK, run_id_in, simrun

pytestmark = pytest.mark.e2e


def test_the_worker_log_has_one_line_per_unit_and_the_output_is_in_the_unit_logs(
    tmp_path: Path,
) -> None:
    """Units that print: their output is in their unit logs (`simrun logs` shows it) and
    not in the worker's log, which has exactly one line per such unit naming its log."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        "tasks:\n  - name: work\n    type: svc-work\n"
        "    settings: {units: 3, say_indices: [0, 2]}\n"
    )
    result = simrun(
        "run", str(wf), "--plugins", WORK, "--processes", "1", "--store", "st", cwd=tmp_path
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run = run_id_in(result.stdout)
    worker_log = "\n".join(p.read_text() for p in (tmp_path / "st" / "logs").glob("worker-*.log"))
    assert "says hello" not in worker_log
    for index in (0, 2):
        unit_log = tmp_path / "st" / "runs" / run / "work" / "logs" / "units"
        path = unit_log / f"unit-{index}.attempt-1.log"
        assert f"unit {index} says hello" in path.read_text()
        lines = [x for x in worker_log.splitlines() if str(path) in x]
        assert len(lines) == 1, worker_log
        shown = simrun("logs", run, "work", str(index), "--store", "st", cwd=tmp_path)
        assert f"unit {index} says hello" in shown.stdout, shown.stdout + shown.stderr
    assert "unit-1.attempt" not in worker_log
