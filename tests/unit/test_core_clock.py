"""The manual clock the liveness tests step: both readings move together, sleeping moves
it, and it never goes back."""

from __future__ import annotations

import pytest

from simrun.core.clock import Every, ManualClock


async def test_a_manual_clock_moves_only_when_told_or_slept_on() -> None:
    """`advance` and `sleep` move the wall and the monotonic readings by the same seconds."""
    clock = ManualClock(now_s=100.0)
    clock.advance(2.5)
    await clock.sleep(1.5)
    await clock.sleep(-3.0)  # a negative sleep returns at once, as asyncio.sleep does
    assert (clock.now(), clock.monotonic()) == (104.0, 4.0)


def test_a_manual_clock_refuses_to_go_back() -> None:
    """Stepping the time backwards is a mistake of the test, refused with the seconds."""
    clock = ManualClock(now_s=0.0)
    with pytest.raises(ValueError, match=r"time does not go back \(-1 s\)"):
        clock.advance(-1)
    assert clock.now() == 0.0


def test_every_is_due_at_first_then_once_a_period() -> None:
    clock = ManualClock()
    every = Every(clock, 1.0)
    assert [every.due(), every.due()] == [True, False]
    clock.advance(0.5)
    assert not every.due()
    clock.advance(0.5)
    assert [every.due(), every.due()] == [True, False]
    every.reset()
    assert every.due()
