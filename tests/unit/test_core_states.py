"""The state rules of units, tasks and runs (simrun.core.states), on tables of cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from simrun.core.states import (
    ACTIVE_TASK_STATES,
    ACTIVE_UNIT_STATES,
    ENDED_RUN_STATES,
    FINISHED_TASK_STATES,
    FINISHED_UNIT_STATES,
    MERGE_INDEX,
    NOT_STARTED_TASK_STATES,
    RUN_STATES,
    TASK_STATES,
    UNFINISHED_UNIT_STATES,
    UNIT_STATES,
    Limits,
    TaskCounts,
    UnitRow,
    next_task_state,
    run_state,
    unit_after_outcome,
    unit_index,
    unit_key,
)

LIMITS = Limits(max_retries=2, max_kills=3)
QUEUED = UnitRow("r", "t", 5, "chunk", "queued", attempt=2, job_id="r:t:5:2", memory_gb=1.0)


def after(unit: UnitRow, outcome: str, attempt: int = 2, error: str | None = "Traceback: x"):
    return unit_after_outcome(
        unit, outcome, attempt, error=error, worker="w1", limit_gb=1.5, limits=LIMITS, now_s=9.0
    )


@pytest.mark.parametrize(
    ("unit", "outcome", "attempt", "state", "errors", "kills"),
    [
        # done is taken from the current attempt, and from older ones once no other
        # attempt is in flight
        (QUEUED, "done", 2, "done", 0, 0),
        (replace(QUEUED, state="pending"), "done", 1, "done", 0, 0),
        (replace(QUEUED, state="failed"), "done", 1, "done", 0, 0),
        # errors retry up to the limit, then fail
        (QUEUED, "failed", 2, "pending", 1, 0),
        (replace(QUEUED, errors=1), "failed", 2, "pending", 2, 0),
        (replace(QUEUED, errors=2), "failed", 2, "failed", 3, 0),
        (replace(QUEUED, state="running"), "timeout", 2, "pending", 1, 0),
        # kills retry up to their own limit
        (QUEUED, "killed", 2, "pending", 0, 1),
        (replace(QUEUED, kills=3), "killed", 2, "failed", 0, 4),
        # hand-backs cost nothing
        (QUEUED, "not_run", 2, "pending", 0, 0),
        (QUEUED, "refused", 2, "pending", 0, 0),
    ],
)
def test_outcome_moves_unit(unit, outcome, attempt, state, errors, kills):
    """An outcome moves a unit to the state the rules give, counting errors and kills."""
    new = after(unit, outcome, attempt)
    assert new is not None
    assert (new.state, new.errors, new.kills) == (state, errors, kills)
    assert new.worker == "w1"
    assert new.finished_s == 9.0


@pytest.mark.parametrize(
    ("unit", "outcome", "attempt"),
    [
        (replace(QUEUED, state="done"), "done", 2),  # already done: ignored
        (replace(QUEUED, state="done"), "failed", 2),
        (QUEUED, "stale", 2),  # the worker skipped it: ignored
        (QUEUED, "failed", 1),  # an older attempt's failure: ignored
        (QUEUED, "done", 1),  # an older attempt's done while attempt 2 is queued: ignored
        (replace(QUEUED, state="running"), "done", 3),  # (the running one decides)
        (QUEUED, "killed", 3),  # an attempt the store never dispatched: ignored
        (replace(QUEUED, state="pending"), "failed", 2),  # released already: ignored
        (replace(QUEUED, state="failed"), "killed", 2),
    ],
)
def test_outcome_ignored(unit, outcome, attempt):
    """Reports for done units, stale reports, non-done outcomes of other attempts or of
    units not in flight, and done from an attempt other than the one in flight change
    nothing."""
    assert after(unit, outcome, attempt) is None


def test_errors_keep_traceback_and_kills_name_limit():
    """A failure keeps the worker's traceback; a kill says the limit it was killed at."""
    failed = after(replace(QUEUED, errors=2), "failed", error="Traceback (most recent call)")
    assert failed is not None
    assert failed.error == "Traceback (most recent call)"
    killed = after(QUEUED, "killed")
    assert killed is not None
    assert killed.error is not None
    assert "1.5 GiB" in killed.error


def test_unknown_outcome_is_an_error():
    """An outcome the rules do not know is refused with its name."""
    with pytest.raises(ValueError, match="bogus"):
        after(QUEUED, "bogus")


@pytest.mark.parametrize(
    ("kind", "index", "key"),
    [("chunk", 7, 7), ("merge", MERGE_INDEX, "merge"), ("command", 0, "command")],
)
def test_unit_keys_round_trip(kind, index, key):
    """Stored indices and wire keys map onto each other."""
    assert unit_key(kind, index) == key
    assert unit_index(key) == index


def test_bad_unit_key():
    """A key that is neither an index nor merge/command is refused, naming it."""
    with pytest.raises(ValueError, match="'other'"):
        unit_index("other")


@pytest.mark.parametrize(
    ("current", "counts", "has_merge", "expected"),
    [
        ("running", TaskCounts(pending=3, done=2), True, ("running", False)),
        ("running", TaskCounts(done=5), True, ("merging", True)),
        ("merging", TaskCounts(done=5, merge="queued"), True, ("merging", False)),
        ("merging", TaskCounts(done=5, merge="done"), True, ("done", False)),
        ("merging", TaskCounts(done=5, merge="failed"), True, ("failed", False)),
        ("running", TaskCounts(done=5), False, ("done", False)),
        ("running", TaskCounts(done=4, failed=1), True, ("failed", False)),
        ("running", TaskCounts(running=1, failed=1), True, ("running", False)),
        ("blocked", TaskCounts(pending=5), False, ("blocked", False)),
        ("blocked", TaskCounts(queued=5), False, ("running", False)),
        ("blocked", TaskCounts(done=5, merge="pending"), True, ("blocked", False)),
        ("blocked", TaskCounts(done=4, failed=1), True, ("failed", False)),
        ("blocked", TaskCounts(done=5), True, ("merging", True)),
        ("waiting", TaskCounts(), False, ("waiting", False)),
        ("running", TaskCounts(), False, ("done", False)),  # a task without units
        ("running", TaskCounts(), True, ("merging", True)),
        ("cancelled", TaskCounts(pending=2), False, ("cancelled", False)),
        ("done", TaskCounts(done=1), False, ("done", False)),
    ],
)
def test_next_task_state(current, counts, has_merge, expected):
    """A started task's state follows from its units; the merge unit is made once."""
    assert next_task_state(current, counts, has_merge) == expected


DEPS = {"a": set(), "b": {"a"}, "c": {"b"}, "d": set()}


@pytest.mark.parametrize(
    ("states", "cancelled", "expected"),
    [
        ({"a": "done", "b": "done", "c": "done", "d": "done"}, False, "succeeded"),
        ({"a": "running", "b": "waiting", "c": "waiting", "d": "done"}, False, "running"),
        ({"a": "done", "b": "done", "c": "waiting", "d": "done"}, False, "running"),
        ({"a": "failed", "b": "waiting", "c": "waiting", "d": "done"}, False, "failed"),
        ({"a": "failed", "b": "waiting", "c": "waiting", "d": "running"}, False, "running"),
        ({"a": "done", "b": "blocked", "c": "waiting", "d": "done"}, False, "running"),
        ({"a": "done", "b": "failed", "c": "waiting", "d": "done"}, False, "failed"),
        ({"a": "running", "b": "waiting", "c": "waiting", "d": "done"}, True, "cancelled"),
    ],
)
def test_run_state(states, cancelled, expected):
    """A run succeeds when all tasks are done, runs while any can progress, else fails."""
    assert run_state(states, DEPS, cancelled) == expected


def test_run_state_rejects_unknown_task_state():
    """A task state outside the known set is refused, naming it."""
    with pytest.raises(ValueError, match="sleeping"):
        run_state({"a": "sleeping"}, {"a": set()})


def test_limits_must_be_non_negative():
    """Negative limits are refused."""
    with pytest.raises(ValueError, match="limits"):
        Limits(max_retries=-1)


def test_start_time_is_filled_once():
    """The worker's start time fills a unit's start time only when it has none."""
    kw = {"error": None, "worker": "w", "limit_gb": 1.0, "limits": LIMITS, "now_s": 9.0}
    fresh = unit_after_outcome(QUEUED, "done", 2, started_s=5.0, **kw)
    assert fresh is not None
    assert fresh.started_s == 5.0
    seen = unit_after_outcome(replace(QUEUED, started_s=3.0), "failed", 2, started_s=5.0, **kw)
    assert seen is not None
    assert seen.started_s == 3.0


# -- the named sets of states agree with the state machines --------------------------------


@pytest.mark.parametrize(
    ("parts", "whole"),
    [
        ((ENDED_RUN_STATES, frozenset({"running"})), RUN_STATES),
        ((NOT_STARTED_TASK_STATES, ACTIVE_TASK_STATES, FINISHED_TASK_STATES), TASK_STATES),
        ((UNFINISHED_UNIT_STATES, FINISHED_UNIT_STATES), UNIT_STATES),
        ((frozenset({"pending"}), ACTIVE_UNIT_STATES), tuple(UNFINISHED_UNIT_STATES)),
    ],
)
def test_state_sets_partition_the_states(parts, whole):
    """Each family of named sets splits its states without overlap and without a gap:
    a run is running or ended; a task not started, active or finished; a unit unfinished
    (pending, or active) or finished."""
    assert sum(len(p) for p in parts) == len(set(whole))
    assert frozenset().union(*parts) == frozenset(whole)


@pytest.mark.parametrize("state", sorted(TASK_STATES))
def test_ended_runs_are_those_of_finished_tasks(state):
    """A run whose every task is in one state has ended exactly when that state is a
    finished one (a run of waiting tasks still runs: nothing upstream failed)."""
    got = run_state({"a": state, "b": state}, {"b": {"a"}})
    assert (got in ENDED_RUN_STATES) == (state in FINISHED_TASK_STATES)


@pytest.mark.parametrize("state", sorted(UNIT_STATES))
def test_unfinished_units_are_counted_unfinished(state):
    """TaskCounts.unfinished counts exactly the units in UNFINISHED_UNIT_STATES."""
    assert TaskCounts.of({state: 1}).unfinished == (state in UNFINISHED_UNIT_STATES)


@pytest.mark.parametrize("state", sorted(UNIT_STATES))
def test_only_active_units_take_a_failure(state):
    """An outcome other than done changes a unit only while it is in ACTIVE_UNIT_STATES
    (in a job on Redis or on a worker)."""
    got = after(replace(QUEUED, state=state), "failed")
    assert (got is not None) == (state in ACTIVE_UNIT_STATES)


@pytest.mark.parametrize("state", sorted(NOT_STARTED_TASK_STATES))
def test_tasks_not_started_keep_their_state(state):
    """Units never move a task that has not started: the controller starts it."""
    assert next_task_state(state, TaskCounts(pending=3), True) == (state, False)


_unit_count = st.integers(min_value=0, max_value=3)


@given(
    current=st.sampled_from(sorted(ACTIVE_TASK_STATES)),
    counts=st.builds(
        TaskCounts,
        pending=_unit_count,
        queued=_unit_count,
        running=_unit_count,
        done=_unit_count,
        failed=_unit_count,
        merge=st.none() | st.sampled_from(sorted(UNIT_STATES)),
    ),
    has_merge=st.booleans(),
)
def test_active_tasks_finish_when_their_units_do(current, counts, has_merge):
    """An active task stays active while a unit (or the merge it needs) is unfinished, and
    becomes a finished state once none is: the sets agree with next_task_state."""
    assume(has_merge or counts.merge is None)  # only a type with a merge has a merge unit
    new, _ = next_task_state(current, counts, has_merge)
    merge_open = has_merge and counts.merge not in FINISHED_UNIT_STATES
    settled = counts.unfinished == 0 and (counts.failed > 0 or not merge_open)
    assert new in (FINISHED_TASK_STATES if settled else ACTIVE_TASK_STATES)
