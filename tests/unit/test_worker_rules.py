"""Pure rules of a worker container's processes: the memory a process is killed at, when a
process switching task is started afresh, and how many units go to a process at once."""

from __future__ import annotations

import pytest

from simrun.worker.pool.processes import (
    KILL_HEADROOM_GB,
    RECYCLE_FRACTION,
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
    ("anon_gb", "baseline_gb", "limit_gb", "fresh"),
    [
        # The colleague's case: an idle interpreter of 19 MiB, a learned no-op of 26.5 MiB.
        pytest.param(19 * MIB_GB, BASE, 26.5 * MIB_GB, False, id="idle interpreter, light task"),
        pytest.param(0.5, 0.0, 2.0, False, id="half of the limit is not past it"),
        pytest.param(1.01, 0.0, 2.0, True, id="past half of the limit"),
        pytest.param(1.01, 0.02, 2.0, False, id="the baseline is not counted"),
        pytest.param(1.2 + BASE, BASE, 2.0, True, id="a kept heap beyond the baseline"),
        pytest.param(5.0, BASE, None, False, id="no limit: never"),
        pytest.param(5.0, BASE, 0.0, False, id="zero limit: never"),
        # Against the limit the process is killed at: 0.005 GiB is raised to ~51 MiB.
        pytest.param(BASE + 20 * MIB_GB, BASE, 0.005, False, id="tiny limit, small heap"),
        pytest.param(BASE + 30 * MIB_GB, BASE, 0.005, True, id="tiny limit, larger heap"),
    ],
)
def test_needs_fresh_start(
    anon_gb: float, baseline_gb: float, limit_gb: float | None, fresh: bool
) -> None:
    """A process switching task restarts when what it keeps beyond its baseline passes
    RECYCLE_FRACTION of the limit it would be killed at."""
    assert RECYCLE_FRACTION == 0.5  # the table's figures assume it
    assert needs_fresh_start(anon_gb, baseline_gb, limit_gb) is fresh


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
