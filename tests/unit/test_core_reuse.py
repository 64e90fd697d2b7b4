"""The rules of reuse (`simrun.core.reuse`): what a fingerprint depends on, which tasks are
forced to run, and which earlier run a task reuses. Pure: no file is read."""

from __future__ import annotations

from typing import Any

import pytest

from simrun.core.reuse import (
    Earlier,
    TaskIdentity,
    choose,
    fingerprints,
    forced_tasks,
    rerun_problems,
    reused_text,
)

TYPE_A = {"name": "heat", "version": "simrun==0.1.0", "command": None, "image": None}
TYPE_B = {"name": "report", "version": "simrun==0.1.0", "command": "r {settings}", "image": None}
ORDER = ["sweep", "summary"]


def chain(
    sweep_settings: dict[str, Any] | None = None,
    summary_settings: dict[str, Any] | None = None,
    sweep_type: dict[str, Any] | None = None,
    plate: str = "h1",
) -> dict[str, str]:
    """The fingerprints of the demo's two tasks: sweep reads a source, summary reads sweep."""
    identities = {
        "sweep": TaskIdentity(
            sweep_type or TYPE_A, sweep_settings or {"grid": 64}, {"plate": "source:plate"}
        ),
        "summary": TaskIdentity(TYPE_B, summary_settings or {"title": "t"}, {"table": "sweep.out"}),
    }
    return fingerprints(ORDER, identities, {"plate": plate})


BASE = chain()


@pytest.mark.parametrize(
    ("changed", "sweep_differs", "summary_differs"),
    [
        ({}, False, False),
        ({"summary_settings": {"title": "other"}}, False, True),
        ({"sweep_settings": {"grid": 32}}, True, True),
        ({"plate": "h2"}, True, True),
        ({"sweep_type": {**TYPE_A, "version": "simrun==0.2.0"}}, True, True),
        ({"sweep_type": {**TYPE_A, "name": "cool"}}, True, True),
        ({"sweep_type": {**TYPE_A, "image": "img:1"}}, True, True),
    ],
)
def test_a_fingerprint_changes_with_what_the_task_depends_on(
    changed: dict[str, Any], sweep_differs: bool, summary_differs: bool
) -> None:
    """A task's fingerprint changes with its type, version, settings or inputs' content,
    and with its upstream's fingerprint (a Merkle chain); nothing else changes it."""
    found = chain(**changed)
    assert (found["sweep"] != BASE["sweep"]) is sweep_differs
    assert (found["summary"] != BASE["summary"]) is summary_differs


def test_settings_are_compared_as_canonical_json() -> None:
    """The order of settings keys does not matter; the types of their values do."""
    a = chain(sweep_settings={"grid": 64, "duration": 0.25})
    b = chain(sweep_settings={"duration": 0.25, "grid": 64})
    c = chain(sweep_settings={"duration": 0.25, "grid": "64"})
    assert a == b
    assert a["sweep"] != c["sweep"]


def test_the_port_read_from_upstream_is_part_of_the_fingerprint() -> None:
    """Reading another output port of the same upstream task is another input."""
    ids = {
        "up": TaskIdentity(TYPE_A, {}, {}),
        "down": TaskIdentity(TYPE_B, {}, {"table": "up.out"}),
    }
    other = {**ids, "down": TaskIdentity(TYPE_B, {}, {"table": "up.extra"})}
    assert (
        fingerprints(["up", "down"], ids, {})["down"]
        != (fingerprints(["up", "down"], other, {})["down"])
    )


DEPS = {"a": set(), "b": {"a"}, "c": {"b"}, "d": set(), "e": {"a", "d"}}


@pytest.mark.parametrize(
    ("rerun", "reuse", "forced"),
    [
        ((), True, set()),
        ((), False, {"a", "b", "c", "d", "e"}),
        (("a",), True, {"a", "b", "c", "e"}),
        (("b",), True, {"b", "c"}),
        (("d",), True, {"d", "e"}),
        (("c", "d"), True, {"c", "d", "e"}),
        (("c",), False, {"a", "b", "c", "d", "e"}),
    ],
)
def test_a_forced_task_forces_what_depends_on_it(
    rerun: tuple[str, ...], reuse: bool, forced: set[str]
) -> None:
    """--no-reuse forces every task; --rerun TASK forces it and, directly or not, every
    task that depends on it; nothing else is forced."""
    assert forced_tasks(DEPS, rerun, reuse) == forced


@pytest.mark.parametrize(
    ("forced", "earlier", "chosen"),
    [
        (False, [], None),
        (True, [Earlier("r1", 1.0, True)], None),
        (False, [Earlier("r1", 1.0, False)], None),
        (False, [Earlier("r1", 1.0, True)], "r1"),
        (False, [Earlier("r1", 1.0, True), Earlier("r2", 2.0, True)], "r2"),
        (False, [Earlier("r1", 1.0, True), Earlier("r2", 2.0, False)], "r1"),
        (False, [Earlier("r2", 2.0, False), Earlier("r1", 1.0, False)], None),
    ],
)
def test_a_task_reuses_the_latest_earlier_run_whose_outputs_are_there(
    forced: bool, earlier: list[Earlier], chosen: str | None
) -> None:
    """A task that is not forced reuses the earlier task with its fingerprint that finished
    last among those whose outputs are still present; none otherwise."""
    assert choose(forced, earlier) == chosen


def test_rerun_names_must_be_tasks_and_reuse_is_shown_with_its_run() -> None:
    """--rerun of a name that is no task is refused naming it and the tasks; a reused task
    is shown as 'reused from RUN'."""
    assert rerun_problems(["sweep", "summary"], ["sweep"]) == []
    (problem,) = rerun_problems(["sweep", "summary"], ["swep"])
    assert "'swep'" in problem
    assert "sweep, summary" in problem
    assert reused_text("20260101-000000-abcdef") == "reused from 20260101-000000-abcdef"
