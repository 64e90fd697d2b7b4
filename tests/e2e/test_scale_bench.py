"""benchmarks/scale.py: a smoke run of the script on a tiny size (a real service, worker
container and private Redis of its own). Figures are printed, never compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("scale-bench")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale.py"


def test_scale_benchmark_runs_500_units_and_prints_its_figures() -> None:
    """The script runs 500 no-op units through a service and a worker to the end and
    prints every figure of its summary, the server-side rate known."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "500", "--timeout-s", "120"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "note:" not in done.stdout, done.stdout  # the run succeeded, status answered
    summary = done.stdout.split("summary:", 1)[1]
    for label in ("units/s server side", "peak service RSS", "GET /runs/RUN", "simrun status"):
        line = next(line for line in summary.splitlines() if label in line)
        assert "n/a" not in line, line
