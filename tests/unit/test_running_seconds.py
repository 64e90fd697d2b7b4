"""`simrun.core.views.running_seconds`: the time a run ran, its pauses left out."""

from __future__ import annotations

import pytest

from simrun.core.views import running_seconds


@pytest.mark.parametrize(
    ("start", "end", "pauses", "expected"),
    [
        (0.0, 10.0, (), 10.0),
        (0.0, 10.0, ((2.0, 5.0),), 7.0),  # a pause inside
        (0.0, 10.0, ((8.0, None),), 8.0),  # still stopped: the pause lasts to the end
        (4.0, 10.0, ((2.0, 5.0),), 5.0),  # a pause that began before the start
        (0.0, 3.0, ((5.0, 9.0),), 3.0),  # a pause after the end
        (0.0, 10.0, ((1.0, 2.0), (4.0, 6.0)), 7.0),
        (5.0, 4.0, (), 0.0),  # never negative
    ],
)
def test_running_seconds_leaves_out_the_parts_of_pauses_in_between(
    start: float, end: float, pauses: tuple[tuple[float, float | None], ...], expected: float
) -> None:
    """The seconds from start to end less the overlap of each pause (an open one lasting
    to the end), never below 0."""
    assert running_seconds(start, end, pauses) == pytest.approx(expected)
