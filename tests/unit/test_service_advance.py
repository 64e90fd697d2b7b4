"""The decisions of the advance step (simrun.service.advance), as tables: which tasks may
start, how a task starts (or fails), and how started tasks move along their units."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from simrun.core.intake import InputLimits
from simrun.core.states import TaskCounts
from simrun.plugins import TaskType
from simrun.runstore.rows import TaskRow
from simrun.service.advance import (
    Counted,
    TaskMove,
    TaskStart,
    plan_moves,
    plan_start,
    startable_tasks,
)


class Settings(BaseModel):
    units: int = 4


SPLIT = TaskType("heat", Settings, count_units="m:count", compute_unit="m:unit")
COMMAND = TaskType("prog", Settings, command="prog {settings}")
LIMITS = InputLimits(max_units_per_task=100, max_units_per_run=150)


def task(name: str, state: str = "waiting", depends=(), has_merge=False, kind="heat"):
    return TaskRow(
        run="r1", name=name, position=0, type=kind, settings={}, inputs={}, depends=depends,
        override=None, memory_override_gb=None, splittable=kind == "heat", has_merge=has_merge,
        state=state, status="", queue="cpu", resource_key=None,  # type: ignore[arg-type]
        resources=None, units=None, started_s=None, finished_s=None,
    )  # fmt: skip


def test_startable_tasks_are_waiting_with_every_input_done():
    tasks = [task("a"), task("b", depends=("a",)), task("c", "running"), task("d", depends=("e",))]
    states = {"a": "waiting", "b": "waiting", "c": "running", "d": "waiting", "e": "done"}
    assert [t.name for t in startable_tasks(tasks, states)] == ["a", "d"]
    states["a"] = "done"
    assert [t.name for t in startable_tasks(tasks, states)] == ["b", "d"]


@given(st.data())
def test_startable_tasks_wait_and_have_all_inputs_done(data: st.DataObject) -> None:
    """A startable task is waiting and every task it reads from is done; none is missed."""
    names = [f"t{i}" for i in range(data.draw(st.integers(0, 12)))]
    deps = {n: set(data.draw(st.lists(st.sampled_from(names[:i]), max_size=4))) if i else set()
            for i, n in enumerate(names)}  # fmt: skip
    states = {n: data.draw(st.sampled_from(["waiting", "running", "done"])) for n in names}
    tasks = [task(n, depends=tuple(sorted(deps[n]))) for n in names]
    ready = {t.name for t in startable_tasks(tasks, states)}
    for n in names:
        assert (n in ready) == (
            states[n] == "waiting" and all(states[d] == "done" for d in deps[n])
        )


@pytest.mark.parametrize(
    ("done", "started", "expected"),
    [
        (set(), set(), ["mesh", "plate"]),
        ({"mesh"}, set(), ["plate"]),
        ({"mesh", "plate"}, set(), ["solve"]),
        ({"mesh", "plate"}, {"solve"}, []),
        ({"mesh", "plate", "solve"}, set(), ["report"]),
        ({"mesh", "plate", "solve", "report"}, set(), []),
    ],
)
def test_startable_tasks_table(done: set[str], started: set[str], expected: list[str]) -> None:
    """Readiness on a diamond-ish graph, step by step."""
    deps = {"mesh": (), "plate": (), "solve": ("mesh", "plate"), "report": ("solve",)}
    tasks = [task(n, depends=d) for n, d in deps.items()]
    states = {n: "done" if n in done else "running" if n in started else "waiting" for n in deps}
    assert sorted(t.name for t in startable_tasks(tasks, states)) == expected


@pytest.mark.parametrize(
    ("task_type", "counted", "in_run", "expected"),
    [
        (SPLIT, Counted(value=40), 0, TaskStart(40, "heat/?")),
        (SPLIT, None, 0, None),  # still counting: it waits
        (SPLIT, Counted(error="count_units failed: ValueError: x"), 0,
         TaskStart(failed="count_units failed: ValueError: x")),
        (SPLIT, Counted(value="4"), 0,
         TaskStart(failed="count_units of type 'heat' returned str '4', not an integer")),
        (SPLIT, Counted(value=120), 0, "a task may have at most 100"),
        (SPLIT, Counted(value=100), 100, "a run may have at most 150"),
        (COMMAND, None, 0, TaskStart(1, "prog/?")),  # a command has one unit, no count
        (COMMAND, None, 150, "a run may have at most 150"),
        (None, None, 0, TaskStart(failed="task type 'heat' is not installed in the service")),
    ],
)  # fmt: skip
def test_plan_start(task_type, counted, in_run, expected):
    """A task starts with its count and its resource key; a count that is not known waits,
    one that is not an integer or past a limit fails the task, naming the limit."""
    row = task("a", kind=task_type.name if task_type else "heat")
    plan = plan_start(row, task_type, counted, in_run, LIMITS, "plate")
    if isinstance(expected, str):
        assert plan is not None
        assert plan.failed is not None
        assert expected in plan.failed
    elif expected is not None and expected.failed is None:
        assert plan is not None
        assert plan.failed is None
        assert plan.units == expected.units
        assert plan.key.startswith(expected.key.split("?")[0])
    else:
        assert plan == expected


def test_plan_start_fails_a_task_whose_resource_key_raises():
    """Plugin code (the cost setting) may raise: the task fails with it."""
    row = task("a")
    plan = plan_start(row, SPLIT, Counted(value=1), 0, LIMITS, object())  # type: ignore[arg-type]
    assert plan is not None
    assert plan.failed is not None
    assert plan.failed.startswith("resource key failed: ")


@pytest.mark.parametrize(
    ("state", "counts", "has_merge", "expected"),
    [
        ("running", TaskCounts(pending=2, done=2), False, []),
        ("running", TaskCounts(done=4), False, [TaskMove("a", "done")]),
        ("running", TaskCounts(done=4), True, [TaskMove("a", "merging", make_merge=True)]),
        ("merging", TaskCounts(done=4, merge="done"), True, [TaskMove("a", "done")]),
        ("running", TaskCounts(done=3, failed=1), False, [TaskMove("a", "failed")]),
        ("blocked", TaskCounts(pending=4), False, []),  # only the dispatcher lifts it
        ("waiting", TaskCounts(), False, []),  # not started: not moved by its units
        ("done", TaskCounts(done=4), False, []),
    ],
)
def test_plan_moves(state, counts, has_merge, expected):
    """Started tasks move as `next_task_state` says; the others stay as they are."""
    tasks = [task("a", state, has_merge=has_merge)]
    assert plan_moves(tasks, {"a": state}, {"a": counts}) == expected
