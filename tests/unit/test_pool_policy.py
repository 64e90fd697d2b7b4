"""The pure decisions of the chunk loop (`simrun.worker.pool.runner`): the pace of batches
and what a death in a batch leaves."""

from __future__ import annotations

import pytest

from simrun.core.wire import UnitKey
from simrun.worker.pool.runner import AHEAD_S, Pace, ended_before_death


@pytest.mark.parametrize(
    ("pace", "ahead"),
    [
        pytest.param(Pace(), False, id="first batch of a task: one unit, none ahead"),
        pytest.param(Pace(1, AHEAD_S), True, id="one short unit: the next waits in the pipe"),
        pytest.param(Pace(1, AHEAD_S + 0.01), False, id="one long unit: checked just before"),
        pytest.param(Pace(2, 5.0), True, id="several units a batch"),
    ],
)
def test_sends_ahead(pace: Pace, ahead: bool) -> None:
    assert pace.sends_ahead is ahead


def test_pace_after_a_batch() -> None:
    """The next pace takes the size `next_batch_size` gives and the batch's seconds."""
    assert Pace(1).after(1, 0.001) == Pace(2, 0.001)
    assert Pace(8).after(8, 0.4) == Pace(2, 0.4)


UNITS: list[UnitKey] = [10, 11, 12, 13]


@pytest.mark.parametrize(
    ("received", "received_s", "slot", "expected"),
    [
        pytest.param(0, 0.0, None, ([], 0.0, 10), id="never started the batch: its first"),
        pytest.param(2, 1.0, None, ([], 0.0, 12), id="not started, two received"),
        pytest.param(4, 1.0, None, ([], 0.0, None), id="not started, all received"),
        pytest.param(1, 0.5, (1, 0.0, 0.5), ([], 0.0, 11), id="died in the unit after"),
        pytest.param(
            1, 0.5, (3, 0.0, 2.5), ([11, 12], 1.0, 13), id="ended well since: seconds shared"
        ),
        pytest.param(0, 0.0, (4, 0.0, 4.0), ([10, 11, 12, 13], 1.0, None), id="all ended"),
        pytest.param(0, 0.0, (9, 0.0, 4.0), ([10, 11, 12, 13], 1.0, None), id="past the end"),
        pytest.param(1, 2.0, (2, 0.0, 1.0), ([11], 0.0, 12), id="never negative seconds"),
    ],
)
def test_ended_before_death(
    received: int,
    received_s: float,
    slot: tuple[int, float, float] | None,
    expected: tuple[list[UnitKey], float, UnitKey | None],
) -> None:
    """The units a dead process's slot says ended well after the outcomes received, the
    seconds of each, and the unit it died in."""
    assert ended_before_death(UNITS, received, received_s, slot) == expected
