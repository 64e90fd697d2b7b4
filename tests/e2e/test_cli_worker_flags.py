"""The worker's memory flag through the real command: ``--worker-memory-gb`` is the
container's memory on worker, run, submit and scale."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_harness import WORK, simrun

pytestmark = pytest.mark.e2e


def test_worker_memory_gb_is_the_container_on_worker(tmp_path: Path) -> None:
    """`simrun worker --help` offers --worker-memory-gb, not --memory-gb."""
    helped = simrun("worker", "--help", cwd=tmp_path)
    assert "--worker-memory-gb" in helped.stdout
    assert "--memory-gb " not in helped.stdout


def test_worker_memory_gb_is_the_container_on_run(tmp_path: Path) -> None:
    """`simrun run --worker-memory-gb` is the memory of each worker container (its help
    says so; `--memory-gb` is not offered there, as it means memory per process on
    `replay`)."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: work\n    type: svc-work\n    settings: {units: 2}\n")
    args = ("run", str(wf), "--plugins", WORK, "--dry-run", "--processes", "2")
    small = simrun(*args, "--worker-memory-gb", "0.1", cwd=tmp_path)
    assert small.returncode == 2, small.stdout + small.stderr
    assert "cannot run on this pool" in small.stdout
    for command in (("run",), ("submit",), ("scale",)):
        helped = simrun(*command, "--help", cwd=tmp_path).stdout
        assert "--worker-memory-gb" in helped, command
        assert "--memory-gb " not in helped, command
    assert "--memory-gb" in simrun("replay", "--help", cwd=tmp_path).stdout
