"""The worker's memory flag through the real command: ``--worker-memory-gb`` is the
container's memory on worker, run, submit and scale; the old ``--memory-gb`` errors in one
line on ``simrun worker`` and still works, with a notice, on ``simrun run``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_harness import WORK, simrun

pytestmark = pytest.mark.e2e


def test_worker_memory_gb_is_the_container_and_the_old_name_errors_in_one_line(
    tmp_path: Path,
) -> None:
    """`simrun worker --help` offers --worker-memory-gb, not --memory-gb; giving the old
    --memory-gb exits 2 before anything starts, with one line that names the new flag."""
    helped = simrun("worker", "--help", cwd=tmp_path)
    assert "--worker-memory-gb" in helped.stdout
    assert "--memory-gb " not in helped.stdout
    old = simrun("worker", "--memory-gb", "2", "--processes", "1", cwd=tmp_path)
    assert old.returncode == 2, old.stdout + old.stderr
    lines = [x for x in old.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, old.stderr
    assert "--worker-memory-gb" in lines[0]
    assert "Traceback" not in old.stderr


def test_worker_memory_gb_is_the_container_and_memory_gb_its_old_name_on_run(
    tmp_path: Path,
) -> None:
    """`simrun run --worker-memory-gb` is the memory of each worker container (its help
    says so; `--memory-gb` is not offered there any more, as it means memory per process
    on `replay`); the old `--memory-gb` still works with a one-line notice."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: work\n    type: svc-work\n    settings: {units: 2}\n")
    args = ("run", str(wf), "--plugins", WORK, "--dry-run", "--processes", "2")
    small = simrun(*args, "--worker-memory-gb", "0.1", cwd=tmp_path)
    assert small.returncode == 2, small.stdout + small.stderr
    assert "cannot run on this pool" in small.stdout
    old = simrun(*args, "--memory-gb", "0.1", cwd=tmp_path)
    assert old.returncode == 2, old.stdout + old.stderr
    assert "old name of --worker-memory-gb" in old.stderr
    assert len([x for x in old.stderr.splitlines() if "--memory-gb" in x]) == 1, old.stderr
    both = simrun(*args, "--memory-gb", "1", "--worker-memory-gb", "1", cwd=tmp_path)
    assert both.returncode == 2
    assert "give --worker-memory-gb only" in both.stderr
    for command in (("run",), ("submit",), ("scale",)):
        helped = simrun(*command, "--help", cwd=tmp_path).stdout
        assert "--worker-memory-gb" in helped, command
        assert "--memory-gb " not in helped, command
    assert "--memory-gb" in simrun("replay", "--help", cwd=tmp_path).stdout
