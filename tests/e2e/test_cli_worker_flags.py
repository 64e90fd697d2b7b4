"""``simrun worker``'s memory flag through the real command: ``--worker-memory-gb`` is the
container's memory (as on run/submit/scale); the old ``--memory-gb`` errors in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_harness import simrun

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
