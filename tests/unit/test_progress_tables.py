"""The tables of ``simrun status`` (latest runs) and ``simrun resources`` (simrun.cli.tables)."""

from __future__ import annotations

import time

import pytest

from simrun.cli.tables import resource_rows, run_rows
from simrun.core.views import parse_runs

NOW = 1_000_000.0


def local(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix_s))


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"id": "r1", "name": "demo", "state": "succeeded", "created_s": NOW - 100,
             "updated_s": NOW - 10, "finished_s": NOW - 10, "message": ""},
            ("r1", "demo", "succeeded", local(NOW - 100), "1 min 30 s", ""),
        ),
        # A running run took so far until now.
        (
            {"id": "r2", "name": None, "state": "running", "created_s": NOW - 5,
             "updated_s": NOW - 4, "finished_s": None, "message": ""},
            ("r2", "", "running", local(NOW - 5), "5 s", ""),
        ),
        (
            {"id": "r3", "name": "x", "state": "failed", "created_s": NOW - 50,
             "updated_s": NOW - 20, "finished_s": NOW - 20, "message": "1 unit failed: a [3]"},
            ("r3", "x", "failed", local(NOW - 50), "30 s", "1 unit failed: a [3]"),
        ),
    ],
)  # fmt: skip
def test_run_rows(row, expected):
    """Per run: id, name, state, submission time, how long it took (so far), message."""
    assert run_rows(parse_runs([row]), NOW) == [expected]


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        (
            {"key": "heat/plate/64", "observations": 30, "samples": 24, "typical_gb": 0.025,
             "requested_gb": 0.035, "seconds_per_unit": 0.16, "source": "learned from 1 run",
             "last_kill_s": None, "last_kill_gb": None},
            ("heat/plate/64", "24 of 30", "26 MiB", "36 MiB", "0.16 s/unit",
             "learned from 1 run", "—"),
        ),
        # Only kills: no percentile, no speed; the last kill with its limit.
        (
            {"key": "fit/m", "observations": 2, "samples": 0, "typical_gb": None,
             "requested_gb": 8.0, "seconds_per_unit": None, "source": "plugin hint",
             "last_kill_s": NOW - 7200, "last_kill_gb": 4.0},
            ("fit/m", "0 of 2", "—", "8 GiB", "learning", "plugin hint",
             "2 h 00 min ago at 4 GiB"),
        ),
    ],
)  # fmt: skip
def test_resource_rows(summary, expected):
    """Per key: samples of observations, percentile, request, speed, source, last kill."""
    assert resource_rows([summary], NOW) == [expected]
