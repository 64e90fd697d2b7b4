"""`simrun logs RUN TASK UNIT --follow` through the real command while the unit runs: its
output is printed as it is written, then its header once it ended (issue 14)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.support.cli_harness import (
    WORK,
    Output,
    run_id_in,
    simrun,
    start_simrun,
    stop_process,
    write_work,
)

pytestmark = pytest.mark.e2e


def test_follow_prints_a_running_units_output_as_it_is_written(tmp_path: Path) -> None:
    """While unit 0 sleeps 6 s after printing its first line, `simrun logs --follow`
    (reading the store, and asking the run's service) prints that line before the unit
    ended (its output file is not there yet); reading the store, it then prints the line
    the unit prints at the end and its outcome, and exits 0 once it ended well."""
    write_work(
        tmp_path / "wf.yaml", units=1, seconds=6, say_indices=[0], say_before=True
    )  # fmt: skip
    run = start_simrun("run", "wf.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    follow = remote = None
    try:
        seen = Output(run)
        seen.wait_for(lambda text: "submitted" in text, timeout_s=60)
        run_id = run_id_in(seen.text(timeout_s=0.1))
        out = tmp_path / "simrun-store" / "runs" / run_id / "work" / "out"
        url = re.search(r"service +(http://\S+)", seen.text(timeout_s=0.1))
        assert url is not None
        follow = start_simrun(
            "logs", run_id, "work", "0", "--follow", "--store", "simrun-store", cwd=tmp_path
        )  # fmt: skip
        remote = start_simrun(
            "logs", run_id, "work", "0", "--follow", "--url", url.group(1), cwd=tmp_path
        )  # fmt: skip
        outputs = {proc: Output(proc) for proc in (follow, remote)}
        for followed in outputs.values():
            followed.wait_for(lambda text: "unit 0 starts" in text, timeout_s=30)
            assert "unit 0 starts" in followed.text(timeout_s=0.1)
            assert "attempt 1: running" in followed.text(timeout_s=0.1)
        assert not (out / "unit-0.json").exists(), "the unit ended before its output showed"
        stop_process(remote)  # the embedded service ends with the run: no more to ask it
        followed = outputs[follow]
        assert follow.wait(timeout=60) == 0, followed.text()
        text = followed.text()
        assert "unit 0 says hello" in text
        assert "attempt 1 of 1: done" in text
        assert text.index("unit 0 starts") < text.index("unit 0 says hello")
        assert text.count("unit 0 starts") == 1, text
        assert run.wait(timeout=60) == 0
    finally:
        for left in (follow, remote, run):
            if left is not None and left.poll() is None:
                stop_process(left)


def test_follow_of_an_ended_run_prints_its_attempts_and_exits(tmp_path: Path) -> None:
    """On a run that ended, `--follow` prints the unit's attempts as `simrun logs` would
    (output, header) and exits at once, without waiting."""
    write_work(tmp_path / "wf.yaml", units=2, say_indices=[1])
    done = simrun("run", "wf.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    started = time.monotonic()
    followed = simrun("logs", run_id_in(done.stdout), "work", "1", "--follow", cwd=tmp_path)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert "unit 1 says hello" in followed.stdout
    assert "attempt 1 of 1: done" in followed.stdout
    assert time.monotonic() - started < 20


def test_follow_of_a_run_prints_each_unit_log_as_it_ends(tmp_path: Path) -> None:
    """`simrun logs RUN --follow`, started while the run's units sleep, prints the listing's
    line of each unit that printed (units 0 and 2, not 1) as it ends, and exits 0 once the
    run ended, saying how it ended."""
    write_work(tmp_path / "wf.yaml", units=3, seconds=4, say_indices=[0, 2])
    run = start_simrun("run", "wf.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    follow = None
    try:
        seen = Output(run)
        seen.wait_for(lambda text: "submitted" in text, timeout_s=60)
        run_id = run_id_in(seen.text(timeout_s=0.1))
        follow = start_simrun("logs", run_id, "--follow", "--store", "simrun-store", cwd=tmp_path)
        followed = Output(follow)
        followed.wait_for(lambda text: "following run" in text, timeout_s=30)
        assert "work unit 0" not in followed.text(timeout_s=0.1)  # not ended yet
        assert follow.wait(timeout=120) == 0, followed.text()
        text = followed.text()
        assert "work unit 0: attempt 1 done" in text, text
        assert "work unit 2: attempt 1 done" in text, text
        assert "work unit 1:" not in text, text
        assert text.rstrip().endswith(f"run {run_id} is succeeded"), text
        assert run.wait(timeout=60) == 0
    finally:
        for left in (follow, run):
            if left is not None and left.poll() is None:
                stop_process(left)
