"""Retries per task through `simrun run` (a real controller, Redis and worker containers):
`retries`, `retry_on`, `retry_delay_s` and `timeout_s` of a task in the workflow."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli_harness import WORK, run_id_in, simrun

pytestmark = pytest.mark.e2e


def starts(out: Path) -> list[float]:
    """The start time of each computation of unit 0 of an ``svc-work`` task."""
    return [float(line.split()[1]) for line in (out / "calls-0.log").read_text().splitlines()]


def test_each_task_retries_by_its_own_rule(tmp_path: Path) -> None:
    """In one run whose units always fail: `retries: 0` fails at the first error;
    `retry_on: [ValueError]` retries a ValueError (the service's 2 retries) but not a
    KeyError; `retry_delay_s: 1.5` holds the retry at least that long (and the second 3 s,
    backoff); `timeout_s: 1` stops a unit that sleeps 60 s, which is not retried
    (`retries: 0`); the run fails and says which units."""
    flag = tmp_path / "fail"
    flag.touch()
    fail = {"units": 1, "fail_flag": str(flag), "fail_indices": [0]}
    tasks = [
        {"name": "once", "type": "svc-work", "settings": fail, "retries": 0},
        {
            "name": "value",
            "type": "svc-work",
            "settings": {**fail, "fail_exception": "ValueError"},
            "retry_on": ["ValueError"],
        },
        {
            "name": "key",
            "type": "svc-work",
            "settings": {**fail, "fail_exception": "KeyError"},
            "retry_on": ["ValueError"],
        },
        {"name": "later", "type": "svc-work", "settings": fail, "retry_delay_s": 1.5},
        {
            "name": "slow",
            "type": "svc-work",
            "settings": {"units": 1, "seconds": 60},
            "timeout_s": 1,
            "retries": 0,
        },
    ]
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    result = simrun(
        "run", str(wf), "--plugins", WORK, "--processes", "2", "--worker-memory-gb", "2",
        "--no-probe", cwd=tmp_path, timeout=90,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    run_dir = tmp_path / "simrun-store" / "runs" / run_id_in(result.stdout)
    assert len(starts(run_dir / "once" / "out")) == 1
    assert len(starts(run_dir / "value" / "out")) == 3
    assert len(starts(run_dir / "key" / "out")) == 1
    later = starts(run_dir / "later" / "out")
    assert len(later) == 3
    assert later[1] - later[0] >= 1.5
    assert later[2] - later[1] >= 3.0
    assert len(starts(run_dir / "slow" / "out")) == 1
    assert "took longer than the unit timeout" in result.stdout + result.stderr
