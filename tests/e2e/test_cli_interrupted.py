"""Interrupted runs of `simrun run` through the real command (issue 14): an interrupted run
shows as `interrupted`, a new `simrun run` on the same store names it and leaves it alone,
`simrun cancel RUN --store` drops it; the store's lock is checked before the plan."""

from __future__ import annotations

import fcntl
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_harness import (
    WORK,
    Output,
    command_after,
    run_id_in,
    simrun,
    start_simrun,
    stop_process,
    wait_for_a_done_unit,
    wait_for_the_guard,
    write_work,
)
from tests.support.units import calls, done_units

pytestmark = pytest.mark.e2e

#: The pause between an interruption and what follows, the time under test: real processes
#: take no injected clock. Long against the 1 s of rounding the checks allow, which compare
#: with the run's own span (created to finished) as the store records it.
PAUSE_S = 3.0


def recorded(run_id: str, cwd: Path) -> dict[str, Any]:
    """The run as `simrun status --json` reads it from the store (``created_s``,
    ``finished_s``: its span, its pauses counted)."""
    shown = simrun("status", run_id, "--store", "simrun-store", "--json", cwd=cwd)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    run: dict[str, Any] = json.loads(shown.stdout)
    return run


def kill_midway(tmp_path: Path) -> tuple[str, Path]:
    """A `simrun run` of 20 slow units SIGKILLed after its first done unit: its run id and
    the task's output directory."""
    write_work(tmp_path / "slow.yaml", name="slow", units=20, seconds=0.3)
    proc = start_simrun("run", "slow.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    store = tmp_path / "simrun-store"
    wait_for_a_done_unit(proc, store)
    proc.kill()
    output, _ = proc.communicate(timeout=10)
    return run_id_in(output), store / "runs" / run_id_in(output) / "work" / "out"


def test_an_interrupted_run_is_shown_named_left_alone_and_cancelled(tmp_path: Path) -> None:
    """A run whose `simrun run` was killed shows as `interrupted` in `simrun status
    --store` (the list and the run, with the commands that go on or drop it); a new `simrun
    run` of another workflow on the store names it with `--resume` and `simrun cancel`,
    and does not compute any of its units; `simrun cancel RUN --store` then cancels it."""
    old, out = kill_midway(tmp_path)
    wait_for_the_guard(tmp_path / "simrun-store")
    before = done_units(out)
    assert 0 < len(before) < 20

    listed = simrun("status", "--store", "simrun-store", cwd=tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    line = next(x for x in listed.stdout.splitlines() if old in x)
    assert " interrupted " in f" {line} ", listed.stdout
    shown = simrun("status", old, "--store", "simrun-store", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"simrun run --resume {old} --store simrun-store" in shown.stdout
    assert f"simrun cancel {old} --store simrun-store" in shown.stdout

    write_work(tmp_path / "quick.yaml", name="quick", units=2)
    second = simrun("run", "quick.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    note = next(x for x in second.stdout.splitlines() if x.startswith("note: run"))
    assert f"run {old} of this store was interrupted" in note
    assert f"simrun run --resume {old} --store simrun-store --plugins {WORK}" in note
    assert f"simrun cancel {old} --store simrun-store" in note
    assert done_units(out) == before, "the interrupted run went on"
    assert all(n == 1 for n in calls(out).values())
    again = simrun("status", old, "--store", "simrun-store", "--json", cwd=tmp_path)
    assert '"state": "interrupted"' in again.stdout, again.stdout

    cancelled = simrun("cancel", old, "--store", "simrun-store", cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert f"run {old} cancelled" in cancelled.stdout
    after = simrun("status", old, "--store", "simrun-store", "--json", cwd=tmp_path)
    assert '"state": "cancelled"' in after.stdout, after.stdout


def test_the_store_lock_error_comes_before_the_plan(tmp_path: Path) -> None:
    """`simrun run` on a store another session holds fails with the lock's error before it
    prints the workflow's plan or forecast; exit non-zero, no traceback."""
    write_work(tmp_path / "quick.yaml", name="quick", units=2)
    store = tmp_path / "simrun-store"
    store.mkdir()
    with (store / ".simrun.lock").open("a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242\n")
        held.flush()
        result = simrun("run", "quick.yaml", "--plugins", WORK, cwd=tmp_path)
    assert result.returncode != 0
    assert "is in use by another `simrun run` (pid 4242)" in result.stderr
    assert "quick.yaml" not in result.stdout, result.stdout
    assert "forecast" not in result.stdout.lower(), result.stdout
    assert "Traceback" not in result.stderr


def test_the_time_of_a_run_leaves_out_the_pause_between_ctrl_c_and_resume(
    tmp_path: Path,
) -> None:
    """Ctrl-C, a pause, then `--resume`: the time the run took ("succeeded in", the `took`
    of `simrun status --store`, a task's time) counts only while it ran."""
    write_work(tmp_path / "slow.yaml", name="slow", units=10, seconds=0.3)
    began = time.monotonic()
    proc = start_simrun("run", "slow.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    store = tmp_path / "simrun-store"
    wait_for_a_done_unit(proc, store)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    run_id = run_id_in(output)
    paused = time.monotonic()
    time.sleep(PAUSE_S)  # the pause under test (see PAUSE_S)
    resumed = time.monotonic()
    finished = simrun("run", "--resume", run_id, "--plugins", WORK, "--processes", "1",
                      cwd=tmp_path)  # fmt: skip
    wall = time.monotonic() - began
    assert finished.returncode == 0, finished.stdout + finished.stderr
    took = re.search(rf"run {run_id} succeeded in (\d+) s", finished.stdout)
    assert took is not None, finished.stdout
    pause = resumed - paused
    assert int(took.group(1)) <= wall - pause + 1, (took.group(0), wall, pause)
    listed = simrun("status", "--store", "simrun-store", cwd=tmp_path).stdout
    row = next(x for x in listed.splitlines() if run_id in x)
    assert f" {took.group(1)} s " in row or f" {int(took.group(1)) + 1} s " in row, row
    shown = simrun("status", run_id, "--store", "simrun-store", cwd=tmp_path).stdout
    task = next(x for x in shown.splitlines() if "│ work" in x)
    seconds = int(re.search(r"│ (\d+) s", task).group(1))  # type: ignore[union-attr]
    assert seconds <= wall - pause + 1, (task, wall, pause)
    run = recorded(run_id, tmp_path)
    span = run["finished_s"] - run["created_s"]
    assert int(took.group(1)) <= span - pause + 1, (took.group(0), span, pause)
    assert seconds <= span - pause + 1, (task, span, pause)


def test_the_time_of_a_killed_run_stops_at_its_last_activity(tmp_path: Path) -> None:
    """A run whose `simrun run` was SIGKILLed (no time to record when it stopped): `simrun
    status --store` does not count the time since as run time, and after `--resume` the
    run's time leaves the pause out (from its last recorded activity)."""
    began = time.monotonic()
    old, _ = kill_midway(tmp_path)
    killed, killed_at = time.monotonic(), time.time()
    time.sleep(PAUSE_S)  # the time since the kill under test (see PAUSE_S)
    listed = simrun("status", "--store", "simrun-store", cwd=tmp_path).stdout
    row = next(x for x in listed.splitlines() if old in x)
    shown = re.search(r" (<1|\d+) s ", row)  # "<1 s" when its one done unit was quick
    assert shown is not None, row
    seconds = 0 if shown.group(1) == "<1" else int(shown.group(1))
    assert seconds <= killed - began + 1, (row, killed - began)
    resumed = time.monotonic()
    finished = simrun("run", "--resume", old, "--plugins", WORK, "--processes", "2",
                      cwd=tmp_path)  # fmt: skip
    wall = time.monotonic() - began
    assert finished.returncode == 0, finished.stdout + finished.stderr
    took = re.search(rf"run {old} succeeded in (\d+) s", finished.stdout)
    assert took is not None, finished.stdout
    assert int(took.group(1)) <= wall - (resumed - killed) + 1, (took.group(0), wall)
    run = recorded(old, tmp_path)
    assert seconds <= killed_at - run["created_s"] + 1, (row, killed_at - run["created_s"])
    span = run["finished_s"] - run["created_s"]
    assert int(took.group(1)) <= span - (resumed - killed) + 1, (took.group(0), span)


def test_a_held_run_shows_as_interrupted_through_the_running_session(tmp_path: Path) -> None:
    """While a new `simrun run` goes on, the interrupted run it leaves alone shows as
    `interrupted` through its service too (`simrun status OLD --url URL`), and the new
    run as `running`."""
    old, _ = kill_midway(tmp_path)
    wait_for_the_guard(tmp_path / "simrun-store")
    write_work(tmp_path / "next.yaml", name="next", units=8, seconds=0.5)
    proc = start_simrun("run", "next.yaml", "--plugins", WORK, "--processes", "1", cwd=tmp_path)
    output = Output(proc)
    seen: list[str] = []

    def says_url(text: str) -> bool:
        seen[:] = [text]
        return "watch it from another shell" in text

    try:
        output.wait_for(says_url)
        url = re.search(r"--url (http://\S+)", seen[0])
        assert url is not None, seen
        held = simrun("status", old, "--url", url.group(1), "--json", cwd=tmp_path)
        assert '"state": "interrupted"' in held.stdout, held.stdout + held.stderr
    finally:
        stop_process(proc)


def test_a_normal_resume_logs_no_warning_about_jobs_lost_from_redis(tmp_path: Path) -> None:
    """After Ctrl-C, `simrun run --resume` starts a fresh private Redis: the jobs the first
    session left in flight are dispatched again with an INFO line that says so, and the
    service's log has no WARNING about jobs "lost from Redis"."""
    write_work(tmp_path / "slow.yaml", units=12, seconds=0.3)
    proc = start_simrun("run", "slow.yaml", "--plugins", WORK, "--processes", "2", cwd=tmp_path)
    store = tmp_path / "simrun-store"
    wait_for_a_done_unit(proc, store)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    resume = command_after(output, "simrun run --resume")
    finished = simrun(*resume[1:], cwd=tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    log = (store / "logs" / "service.log").read_text()
    assert "lost from Redis" not in log, log
    assert not [x for x in log.splitlines() if " WARNING " in x], log
