"""The log of a unit whose worker process died, kept by a real worker container."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.core.layout import task_logs
from simrun.core.unitlogs import read_unit_logs
from tests.support.harness import RUN, make_spec, run_burst

pytestmark = pytest.mark.e2e


async def test_a_unit_whose_process_died_counts_the_output_it_printed(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A unit that prints and then ends its own process keeps what it printed in its log,
    and its header's output_bytes counts those bytes (it is not 0 because the process
    died before the unit's end marker)."""
    settings = {"crash_indices": [1], "print_indices": [1]}
    spec = make_spec(tmp_path, "crashy", "test-crash", [0, 1, 2], settings, attempt=1)
    _, reports = await run_burst(redis_url, redis_prefix, [spec], processes=1)
    assert reports[spec.job_id].outcomes[1] in ("failed", "killed")
    logs = task_logs(spec.paths.task_paths().task_dir)
    (attempt,) = read_unit_logs(logs, RUN, "crashy", 1).attempts
    assert "unit 1 says hello on stdout" in attempt.output
    assert "unit 1 says hello on stderr" in attempt.output
    assert attempt.header.outcome in ("failed", "killed")
    assert attempt.header.output_bytes == len(attempt.output.encode()) > 0
