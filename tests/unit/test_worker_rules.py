"""Pure rules of a worker container's processes: the memory a process is killed at, when a
process switching task is started afresh, and how many units go to a process at once."""

from __future__ import annotations

import pytest

from simrun.worker.pool.processes import (
    KILL_HEADROOM_GB,
    RECYCLE_KEPT_GB,
    kill_limit_gb,
    needs_fresh_start,
)
from simrun.worker.pool.runner import BATCH_TARGET_S, MAX_BATCH, next_batch_size

MIB_GB = 1 / 1024
BASE = 19 * MIB_GB  # an idle CPython that imported simrun


@pytest.mark.parametrize(
    ("limit_gb", "baseline_gb", "expected"),
    [
        pytest.param(None, BASE, None, id="no limit"),
        pytest.param(0.0, BASE, None, id="a zero limit is no limit"),
        pytest.param(2.0, BASE, 2.0, id="a limit above baseline + headroom is kept"),
        pytest.param(
            BASE + KILL_HEADROOM_GB, BASE, BASE + KILL_HEADROOM_GB, id="exactly at the edge"
        ),
        pytest.param(0.005, BASE, BASE + KILL_HEADROOM_GB, id="below the baseline: raised"),
        pytest.param(
            26.5 * MIB_GB, BASE, BASE + KILL_HEADROOM_GB, id="above the baseline, little room"
        ),
        pytest.param(0.005, 0.0, KILL_HEADROOM_GB, id="baseline unknown: the headroom"),
    ],
)
def test_kill_limit(limit_gb: float | None, baseline_gb: float, expected: float | None) -> None:
    """A process is killed past the job's limit, but never below its own baseline plus
    KILL_HEADROOM_GB (a limit the bare interpreter cannot meet would only loop kills)."""
    assert kill_limit_gb(limit_gb, baseline_gb) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("anon_gb", "baseline_gb", "fresh"),
    [
        # An idle interpreter of 19 MiB: all of it is its baseline.
        pytest.param(19 * MIB_GB, BASE, False, id="idle interpreter"),
        pytest.param(BASE + 0.05 * MIB_GB, BASE, False, id="what a light task leaves"),
        pytest.param(BASE + RECYCLE_KEPT_GB, BASE, False, id="exactly the threshold"),
        pytest.param(BASE + 6 * MIB_GB, BASE, True, id="a module such as numpy"),
        pytest.param(BASE + 50 * MIB_GB, BASE, True, id="a setup's state (the issue's case)"),
        pytest.param(1.003, 1.0, False, id="a large baseline is not counted"),
        pytest.param(1.01, 0.0, True, id="baseline unknown: all is kept"),
    ],
)
def test_needs_fresh_start(anon_gb: float, baseline_gb: float, fresh: bool) -> None:
    """A process switching task restarts when what it keeps beyond its baseline passes
    RECYCLE_KEPT_GB (it would count in the new task's peak), whatever the job's limit."""
    assert RECYCLE_KEPT_GB == 4 * MIB_GB  # the table's figures assume it
    assert needs_fresh_start(anon_gb, baseline_gb) is fresh


@pytest.mark.parametrize(
    ("size", "units", "elapsed_s", "expected"),
    [
        pytest.param(1, 1, 0.000_2, 2, id="fast: doubles"),
        pytest.param(256, 256, 0.05, 512, id="still fast: doubles"),
        pytest.param(512, 512, 0.05, MAX_BATCH, id="never past MAX_BATCH"),
        pytest.param(MAX_BATCH, MAX_BATCH, 0.0, MAX_BATCH, id="no measurable time"),
        pytest.param(64, 64, 0.64, 10, id="slower: as many as fit in the target"),
        pytest.param(8, 8, 8.0, 1, id="a unit longer than the target: one at a time"),
        pytest.param(4, 2, 0.02, 8, id="a short batch (stale units left out) counts its units"),
        pytest.param(4, 0, 0.0, 4, id="no unit sent: unchanged"),
    ],
)
def test_next_batch_size(size: int, units: int, elapsed_s: float, expected: int) -> None:
    """The next batch holds as many units as fit in BATCH_TARGET_S at the pace of the last
    one, at most twice as many as it and MAX_BATCH, at least one."""
    assert BATCH_TARGET_S == 0.1  # the table's figures assume it
    assert next_batch_size(size, units, elapsed_s) == expected
