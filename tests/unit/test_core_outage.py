"""Riding out a Redis outage, the shared rules (simrun.core.outage): the backoff between two
tries and the state of the link, on tables of cases."""

from __future__ import annotations

import pytest

from simrun.core.outage import RECONNECT_FIRST_S, RECONNECT_MAX_S, LinkState, backoff_s


@pytest.mark.parametrize(
    ("failures", "jitter", "first_s", "max_s", "expected"),
    [
        (0, 1.0, 0.1, 5.0, 0.0),  # no failure: no pause
        (-3, 0.5, 0.1, 5.0, 0.0),
        (1, 1.0, 0.1, 5.0, 0.1),  # the first pause, full
        (1, 0.0, 0.1, 5.0, 0.05),  # jitter takes off up to half
        (2, 1.0, 0.1, 5.0, 0.2),  # doubled per failure
        (3, 1.0, 0.1, 5.0, 0.4),
        (6, 1.0, 0.1, 5.0, 3.2),
        (7, 1.0, 0.1, 5.0, 5.0),  # capped
        (7, 0.0, 0.1, 5.0, 2.5),  # the cap with the most jitter
        (10_000, 1.0, 0.1, 5.0, 5.0),  # no overflow after a very long outage
        (4, 0.5, 1.0, 2.0, 1.5),  # another cap
        (1, 1.0, 2.0, 2.0, 2.0),  # first equal to the cap
    ],
)
def test_backoff(failures: int, jitter: float, first_s: float, max_s: float, expected: float):
    """Capped exponential backoff with jitter: first_s doubled per failure after the first,
    at most max_s, times (0.5 + jitter / 2)."""
    assert backoff_s(failures, jitter, first_s=first_s, max_s=max_s) == pytest.approx(expected)


def test_backoff_defaults() -> None:
    """The defaults begin at RECONNECT_FIRST_S and end at RECONNECT_MAX_S."""
    assert backoff_s(1, 1.0) == RECONNECT_FIRST_S
    assert backoff_s(100, 1.0) == RECONNECT_MAX_S


@pytest.mark.parametrize(
    ("jitter", "first_s", "max_s"),
    [(-0.1, 0.1, 5.0), (1.1, 0.1, 5.0), (0.5, 0.0, 5.0), (0.5, 6.0, 5.0)],
)
def test_backoff_refuses_bad_parameters(jitter: float, first_s: float, max_s: float) -> None:
    """A jitter outside [0, 1] or a first pause not in (0, max_s] is a ValueError."""
    with pytest.raises(ValueError, match=r"jitter|first_s"):
        backoff_s(2, jitter, first_s=first_s, max_s=max_s)


def test_link_state_changes_once_per_outage() -> None:
    """Only the first failure of an outage and the first success after it change the state
    (one log line each); failures are counted for the backoff, and reset when back."""
    link = LinkState()
    assert link.up
    assert link.back(1.0) is None
    assert link.lost(10.0, "refused") is True
    assert (link.up, link.failures, link.reason) == (False, 1, "refused")
    assert link.lost(11.0, "refused again") is False
    assert link.lost(12.5, "and again") is False
    assert (link.failures, link.reason, link.down_since) == (3, "refused", 10.0)
    assert link.down_for(14.0) == 4.0
    assert link.back(16.0) == 6.0
    assert (link.up, link.failures, link.back_at, link.down_for(17.0)) == (True, 0, 16.0, None)
    assert link.back(17.0) is None
    assert link.lost(20.0, "second outage") is True
    assert link.back_at == 16.0  # the last return until the next one
