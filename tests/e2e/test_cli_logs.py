"""``simrun logs`` on the store of a real ``simrun run`` whose unit failed: the unit's
output, traceback and attempt history, the end-of-run lines pointing at it, and the logs
of the session appended by the next session rather than overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_harness import WORK, command_after, run_id_in, simrun, write_work

pytestmark = pytest.mark.e2e


def test_logs_show_a_failed_units_output_traceback_and_attempts(tmp_path: Path) -> None:
    """A unit that prints and fails on each of its 2 attempts: the end of `simrun run`
    names `simrun logs RUN work 2 --store …`; that command prints both attempts with worker,
    process, memory, times, the unit's output and traceback; --attempt 1 only the first;
    `simrun logs RUN` lists the unit; unknown task, unit and run are one line each; a
    second session (the replay) appends to the worker and service logs; --follow of a
    unit whose last attempt ended well prints it and returns."""
    flag = tmp_path / "broken"
    flag.touch()
    write_work(
        tmp_path / "wf.yaml",
        units=4,
        fail_flag=str(flag),
        fail_indices=[2],
        say_indices=[1, 2],
    )
    failed = simrun("run", "wf.yaml", "--plugins", WORK, "--max-retries", "1", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    run_id = run_id_in(failed.stdout)
    hint = command_after(failed.stdout, "traceback and output:")
    assert hint[3:] == ["simrun", "logs", run_id, "work", "2", "--store", "simrun-store"]

    shown = simrun(*hint[4:], cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    text = shown.stdout
    assert "=== work unit 2, attempt 1 of 2: failed ===" in text
    assert "=== work unit 2, attempt 2 of 2: failed ===" in text
    assert text.count("unit 2 says hello from process") == 2
    assert text.count("RuntimeError: unit 2 fails on purpose") == 2
    assert "Traceback (most recent call last)" in text
    assert "worker local-" in text
    assert "· process " in text
    assert "memory: peak " in text
    assert "job ran " in text

    first = simrun("logs", run_id, "work", "2", "--attempt", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "attempt 1 of 2" in first.stdout
    assert "attempt 2 of 2" not in first.stdout

    listing = simrun("logs", run_id, cwd=tmp_path)  # ./simrun-store, as no --url is given
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].startswith("work unit 2: attempt 2 failed on local-"), lines
    assert lines[1].startswith("work unit 1: attempt 1 done"), lines
    assert len(lines) == 2  # units 0 and 3 printed nothing and ended well: no log

    for args, says in [
        (("nope", "1"), f"run '{run_id}' has no task 'nope'"),
        (("work", "0"), "unit 0 of task 'work'"),
        (("work", "2", "--attempt", "3"), "no log of attempt 3 (attempts with one: 1, 2)"),
    ]:
        bad = simrun("logs", run_id, *args, cwd=tmp_path)
        assert bad.returncode != 0
        [line] = bad.stderr.strip().splitlines()
        assert line.startswith("error: ")
        assert says in bad.stderr
        assert "Traceback" not in bad.stderr
    unknown = simrun("logs", "20200101-000000-abcdef", cwd=tmp_path)
    assert "there is no run '20200101-000000-abcdef'" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1

    logs_dir = tmp_path / "simrun-store" / "logs"
    before = (logs_dir / "worker-1.log").read_text()
    flag.unlink()
    replay = command_after(failed.stdout, "simrun replay")
    again = simrun(*replay[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    after = (logs_dir / "worker-1.log").read_text()
    assert after.startswith(before)
    assert after.count("--- simrun session (pid ") == 2
    assert (logs_dir / "service.log").read_text().count("--- simrun session (pid ") == 2

    followed = simrun("logs", run_id, "work", "2", "--follow", cwd=tmp_path, timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert "attempt 3 of 3: done" in followed.stdout
