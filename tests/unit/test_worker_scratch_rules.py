"""The pure rules of a worker's local scratch (`simrun.worker.scratch`)."""

from __future__ import annotations

import pytest

from simrun.worker.scratch import room_gb, scratch_admission, scratch_limit_gb


@pytest.mark.parametrize(
    ("need", "free", "task", "held", "decision"),
    [
        (0.0, 1.0, 0.0, 0.0, "run"),  # no scratch asked
        (50.0, None, 0.0, 0.0, "run"),  # free space unknown: not judged
        (5.0, 10.0, 0.0, 0.0, "run"),
        (10.0, 10.0, 0.0, 0.0, "run"),  # exactly
        (10.0, 2.0, 8.0, 8.0, "run"),  # its own task holds 8 of its 10 already
        (10.0, 2.0, 0.0, 8.0, "wait"),  # another task holds 8: freed when it ends
        (10.0, 2.0, 3.0, 5.0, "refuse"),  # even all of it freed: 7 < 10
        (100.0, 50.0, 0.0, 0.0, "refuse"),
    ],
)
def test_scratch_admission(need, free, task, held, decision):
    """A job starts when its task's scratch fits in the free space plus what the task holds
    here already; waits when it fits only once other tasks' scratch here is freed; is
    refused when it never fits."""
    assert scratch_admission(need, free, task, held) == decision


@pytest.mark.parametrize(
    ("free", "held", "room"), [(None, 3.0, None), (10.0, 0.0, 10.0), (2.0, 8.0, 10.0)]
)
def test_room_advertised(free, held, room):
    """A worker advertises its free scratch plus what its tasks' scratch holds (freed when
    they end), so a task is never blocked by its own scratch."""
    assert room_gb(free, held) == room


@pytest.mark.parametrize(
    ("asked", "limit"), [(0.001, 0.251), (1.0, 1.5), (10.0, 15.0), (0.2, 0.45)]
)
def test_scratch_limit(asked, limit):
    """A task's job is stopped past 1.5 times its scratch_gb, and at least 0.25 GiB above."""
    assert scratch_limit_gb(asked) == pytest.approx(limit)
