"""A task's own retry rule (`RetryRule`): how many errors, which outcomes, what delay; and
the exception type read from a traceback."""

from __future__ import annotations

import pytest

from simrun.core.states import (
    MAX_RETRY_DELAY_S,
    Limits,
    RetryRule,
    UnitRow,
    exception_type,
    unit_after_outcome,
)

LIMITS = Limits(max_retries=2, max_kills=3)
RUNNING = UnitRow("r", "t", 5, "chunk", "running", attempt=2, job_id="j", memory_gb=1.0)
VALUE_ERROR = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad x\n'
KEY_ERROR = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'k'\n"


def after(outcome: str, rule: RetryRule | None, errors: int = 0, error: str | None = VALUE_ERROR):
    unit = UnitRow("r", "t", 5, "chunk", "running", attempt=2, job_id="j", errors=errors)
    result = unit_after_outcome(
        unit, outcome, 2, error=error, worker="w", limit_gb=1.0, limits=LIMITS, now_s=100.0,
        rule=rule,
    )  # fmt: skip
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("rule", "outcome", "errors", "error", "state"),
    [
        # no rule of its own: the service's limits (2 retries of anything)
        (None, "failed", 0, VALUE_ERROR, "pending"),
        (None, "failed", 2, VALUE_ERROR, "failed"),
        (None, "killed", 0, None, "pending"),
        # retries: 0 fails at the first error or timeout
        (RetryRule(retries=0), "failed", 0, VALUE_ERROR, "failed"),
        (RetryRule(retries=0), "timeout", 0, None, "failed"),
        # retries: 5 goes past the service's 2
        (RetryRule(retries=5), "failed", 4, VALUE_ERROR, "pending"),
        (RetryRule(retries=5), "failed", 5, VALUE_ERROR, "failed"),
        # retry_on an exception type: that type is retried, another fails at once
        (RetryRule(retry_on=("ValueError",)), "failed", 0, VALUE_ERROR, "pending"),
        (RetryRule(retry_on=("ValueError",)), "failed", 0, KEY_ERROR, "failed"),
        (RetryRule(retry_on=("ValueError",)), "failed", 0, "no traceback", "failed"),
        (RetryRule(retry_on=("ValueError",)), "timeout", 0, None, "failed"),
        (RetryRule(retry_on=("ValueError",)), "killed", 0, None, "failed"),
        # retry_on kinds
        (RetryRule(retry_on=("memory",)), "killed", 0, None, "pending"),
        (RetryRule(retry_on=("memory",)), "failed", 0, VALUE_ERROR, "failed"),
        (RetryRule(retry_on=("timeout",)), "timeout", 0, None, "pending"),
        (RetryRule(retry_on=("error",)), "failed", 0, KEY_ERROR, "pending"),
        # retry_on and retries together: named, and within the count
        (RetryRule(retries=1, retry_on=("ValueError",)), "failed", 1, VALUE_ERROR, "failed"),
        # hand-backs never count
        (RetryRule(retries=0, retry_on=("KeyError",)), "not_run", 0, None, "pending"),
    ],
)
def test_a_task_rule_decides_what_is_retried(
    rule: RetryRule | None, outcome: str, errors: int, error: str | None, state: str
) -> None:
    """`retries` bounds the errors and timeouts retried (the service's max_retries without);
    `retry_on` names what is retried at all (memory, timeout, error, exception types), and
    anything it does not name fails the unit at once; a kill for memory keeps its own
    count (max_kills) when it is retried."""
    assert after(outcome, rule, errors, error).state == state


@pytest.mark.parametrize(
    ("delay", "errors", "not_before"),
    [
        (0.0, 0, None),
        (2.0, 0, 102.0),  # first retry: the delay
        (2.0, 1, 104.0),  # second: twice that
        (2.0, 2, 108.0),  # third: four times
        (3000.0, 3, 100.0 + MAX_RETRY_DELAY_S),  # capped
    ],
)
def test_a_retry_waits_its_delay_with_backoff(
    delay: float, errors: int, not_before: float | None
) -> None:
    """A unit sent back after an error is not dispatched before now + retry_delay_s x
    2^(retries so far), at most MAX_RETRY_DELAY_S; without a delay it may go at once."""
    rule = RetryRule(retries=10, retry_delay_s=delay)
    assert after("failed", rule, errors).not_before_s == not_before


def test_a_kill_for_memory_is_retried_without_delay() -> None:
    """The delay is for errors and timeouts: a kill for memory goes again at once (with
    more memory), and a unit dispatched again forgets an old not-before time."""
    rule = RetryRule(retry_delay_s=5.0)
    unit = UnitRow("r", "t", 5, "chunk", "running", attempt=2, job_id="j", not_before_s=50.0)
    result = unit_after_outcome(
        unit, "killed", 2, error=None, worker="w", limit_gb=1.0, limits=LIMITS, now_s=100.0,
        rule=rule,
    )  # fmt: skip
    assert result is not None
    assert result.state == "pending"
    assert result.not_before_s is None


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (VALUE_ERROR, "ValueError"),
        (KEY_ERROR, "KeyError"),
        ("Traceback ...\nsome.module.CustomError: boom\n\n", "CustomError"),
        ("Traceback ...\nStopIteration\n", "StopIteration"),
        ("timed out", None),
        ("killed for memory at its limit of 1 GiB per process", None),
        ("", None),
        (None, None),
    ],
)
def test_the_exception_type_is_the_last_line_of_the_traceback(
    error: str | None, name: str | None
) -> None:
    """The type an error raised is read from the last line of its traceback, without its
    module; a message that is no traceback has none."""
    assert exception_type(error) == name


def test_a_rule_is_read_from_its_stored_json() -> None:
    """The stored fields give the rule; timeout_s (dispatch's) and absent fields are ignored."""
    stored = {"retries": 1, "retry_on": ["ValueError"], "retry_delay_s": 2, "timeout_s": 5}
    assert RetryRule.of(stored) == RetryRule(1, ("ValueError",), 2.0)
    assert RetryRule.of(None) == RetryRule()
