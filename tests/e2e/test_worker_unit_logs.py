"""The logs of a chunk's units, kept in the run's directory by a real worker container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simrun.core.layout import task_logs
from simrun.core.unitlogs import attempt_paths, read_unit_logs
from tests.support.harness import RUN, make_spec, run_burst

pytestmark = pytest.mark.e2e


async def test_a_unit_that_prints_and_raises_keeps_its_output_traceback_and_header(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A unit that prints and raises gets a log with what it printed and a header with its
    traceback, worker, process, attempt, memory and times; a unit that printed and ended
    well gets its output and a "done" header; a unit that printed nothing and ended well
    gets no file at all. The traceback starts at the plugin's own code."""
    settings = {"fail_indices": [1], "print_indices": [0, 1]}
    spec = make_spec(tmp_path, "flaky", "test-flaky", [0, 1, 2], settings, attempt=2)
    container, reports = await run_burst(redis_url, redis_prefix, [spec], processes=1)
    entry = reports[spec.job_id]
    assert entry.outcomes == {0: "done", 1: "failed", 2: "done"}
    logs = task_logs(spec.paths.task_paths().task_dir)

    failed = read_unit_logs(logs, RUN, "flaky", 1)
    (attempt,) = failed.attempts
    header = attempt.header
    assert "unit 1 says hello on stdout" in attempt.output
    assert "unit 1 says hello on stderr" in attempt.output
    assert "unit 0 says" not in attempt.output  # its neighbour's output stays its own
    assert header.outcome == "failed"
    assert header.error is not None
    assert "Traceback" in header.error
    assert "ValueError: unit 1 fails on purpose" in header.error
    # the traceback starts at the plugin's frame, not in the worker process's own code
    first_frame = header.error.splitlines()[1]
    assert "tests/support/tasks.py" in first_frame, header.error
    assert "child.py" not in header.error
    assert (header.attempt, header.unit, header.job_id) == (2, 1, spec.job_id)
    assert header.worker == container.worker_id
    assert isinstance(header.pid, int)
    assert header.pid > 0
    assert header.peak_gb > 0
    assert header.started <= header.finished
    assert header.output_bytes == len(attempt.output.encode())

    (done,) = read_unit_logs(logs, RUN, "flaky", 0).attempts
    assert done.header.outcome == "done"
    assert done.header.error is None
    # stdout is buffered and stderr is not: the two lines may come in either order
    assert sorted(done.output.splitlines()) == [
        "unit 0 says hello on stderr",
        "unit 0 says hello on stdout",
    ]
    for path in attempt_paths(logs, 2, 2):
        assert not path.exists()
    names = sorted(p.name for p in (logs / "units").iterdir())
    assert names == [
        "unit-0.attempt-2.json",
        "unit-0.attempt-2.log",
        "unit-1.attempt-2.json",
        "unit-1.attempt-2.log",
    ]
    assert json.loads((logs / "units" / "unit-1.attempt-2.json").read_text())["unit"] == 1


async def test_a_failed_command_attempt_has_a_header_beside_its_output(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A command that prints on both streams and fails: its attempt gets a header (worker,
    outcome, error) read together with the attempt's stdout and stderr files."""
    spec = make_spec(tmp_path, "cmd", "test-prints", kind="command", attempt=1, base_gb=0.25)
    container, reports = await run_burst(redis_url, redis_prefix, [spec])
    assert reports[spec.job_id].outcomes == {"command": "failed"}
    logs = task_logs(spec.paths.task_paths().task_dir)
    (attempt,) = read_unit_logs(logs, RUN, "cmd", "command").attempts
    assert attempt.header.outcome == "failed"
    assert attempt.header.worker == container.worker_id
    assert attempt.header.error
    assert "to-out" in attempt.output
    assert "to-err" in attempt.output
    assert [p.name for p in attempt.log_paths] == ["attempt-1.out", "attempt-1.err"]
