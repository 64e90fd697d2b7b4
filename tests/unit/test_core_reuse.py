"""The rules of reuse (`simrun.core.reuse`): what a fingerprint depends on, which tasks are
forced to run, and which earlier run a task reuses. Pure: no file is read."""

from __future__ import annotations

from typing import Any

import pytest

from simrun.core.ranges import Ranges
from simrun.core.reuse import (
    Earlier,
    TaskIdentity,
    UnitsEarlier,
    UnitStart,
    all_fingerprints,
    choose,
    choose_units,
    covered,
    forced_tasks,
    rerun_problems,
    reusable_units,
    reused_text,
    take_units,
    unit_fingerprint,
    unit_start,
    units_reused_text,
)
from simrun.plugins import UnitOutputs

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
    return all_fingerprints(ORDER, identities, {"plate": plate})[0]


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
        all_fingerprints(["up", "down"], ids, {})[0]["down"]
        != (all_fingerprints(["up", "down"], other, {})[0]["down"])
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


# -- reuse per unit ------------------------------------------------------------------------

PARTS = UnitOutputs(files=("part-{index}.json",), count_settings=("units",))


def unit_print(
    settings: dict[str, Any], units: UnitOutputs | None = PARTS, plate: str = "h1"
) -> str | None:
    identity = TaskIdentity(TYPE_A, settings, {"plate": "source:plate"}, units)
    return unit_fingerprint(identity, {"plate": f"source:{plate}"})


UNIT_BASE = unit_print({"units": 10, "seed": 1})


@pytest.mark.parametrize(
    ("settings", "units", "plate", "same"),
    [
        ({"units": 10, "seed": 1}, PARTS, "h1", True),
        ({"units": 99, "seed": 1}, PARTS, "h1", True),  # a count setting only counts
        ({"seed": 1}, PARTS, "h1", True),  # the count setting left out altogether
        ({"units": 10, "seed": 2}, PARTS, "h1", False),
        ({"units": 10, "seed": 1, "extra": 0}, PARTS, "h1", False),
        ({"units": 10, "seed": 1}, PARTS, "h2", False),  # another input
        ({"units": 10, "seed": 1}, UnitOutputs(("p{index}.json",), ("units",)), "h1", False),
        ({"units": 10, "seed": 1}, UnitOutputs(("part-{index}.json",)), "h1", False),
    ],
)
def test_a_unit_fingerprint_ignores_only_the_count_settings(
    settings: dict[str, Any], units: UnitOutputs, plate: str, same: bool
) -> None:
    """Two tasks' units are the same per index when the type, inputs and every setting
    but the declared count settings are equal, and the declared files too."""
    assert (unit_print(settings, units, plate) == UNIT_BASE) is same


def test_a_type_without_unit_outputs_has_no_unit_fingerprint() -> None:
    """No declaration, no unit fingerprint: its units are never reused one by one; the
    whole fingerprint still changes with a count setting."""
    assert unit_print({"units": 10}, None) is None
    identities = {n: TaskIdentity(TYPE_A, {"units": n}, {}, PARTS) for n in ("a", "b")}
    identities["b"] = TaskIdentity(TYPE_A, {"units": 11}, {}, PARTS)
    whole, units = all_fingerprints(["a", "b"], identities, {})
    assert whole["a"] != whole["b"]
    assert units["a"] == units["b"]


def test_a_unit_fingerprint_follows_the_whole_fingerprint_of_its_upstream() -> None:
    """A task reading an upstream whose count changed gets another unit fingerprint: the
    upstream's output may differ."""

    def prints(upstream_units: int) -> str:
        identities = {
            "up": TaskIdentity(TYPE_A, {"units": upstream_units}, {}, PARTS),
            "down": TaskIdentity(TYPE_A, {"units": 3}, {"table": "up.out"}, PARTS),
        }
        return all_fingerprints(["up", "down"], identities, {})[1]["down"]

    assert prints(4) == prints(4)
    assert prints(4) != prints(5)


E1, E2, E3, E4 = (UnitsEarlier(f"r{i}", "t", float(i), 5) for i in (1, 2, 3, 4))


@pytest.mark.parametrize(
    ("forced", "earlier", "chosen"),
    [
        (False, [], []),
        (True, [E1], []),
        (False, [UnitsEarlier("r0", "t", 9.0, 0)], []),  # nothing to take
        (False, [E1], ["r1"]),
        (False, [E1, E2], ["r2", "r1"]),
        (False, [E2, E1, E4, E3], ["r4", "r3", "r2"]),  # at most UNIT_SOURCES, latest first
    ],
)
def test_units_come_from_the_latest_done_task_of_the_unit_fingerprint(
    forced: bool, earlier: list[UnitsEarlier], chosen: list[str]
) -> None:
    """A forced task takes no unit; else the earlier tasks with units are tried latest
    first (the next one when none of its files are left), a few at most."""
    assert [e.run for e in choose_units(forced, earlier)] == chosen


@pytest.mark.parametrize(
    ("count", "earlier_units", "present", "reused"),
    [
        (6, 4, [True] * 4, [range(0, 4)]),  # more units: the first four are taken
        (2, 4, [True] * 2, [range(0, 2)]),  # fewer: those it still has
        (6, 4, [True, False, True, True], [range(0, 1), range(2, 4)]),  # a file is gone
        (6, 4, [False] * 4, []),
        (0, 4, [], []),
        (3, 0, [], []),
    ],
)
def test_a_unit_is_reused_when_both_tasks_had_it_and_its_files_are_there(
    count: int, earlier_units: int, present: list[bool], reused: list[range]
) -> None:
    """Unit i is taken when i is below both counts and all its files are present."""
    assert reusable_units(count, earlier_units, present) == reused


def test_reusable_units_needs_a_flag_per_shared_unit() -> None:
    """Fewer presence flags than shared units is a caller's mistake, said at once."""
    with pytest.raises(ValueError, match="presence flags"):
        reusable_units(5, 5, [True])


@pytest.mark.parametrize(
    ("count", "reused", "frontier", "pending", "n"),
    [
        (10, [], 0, (), 0),
        (10, [range(0, 4)], 4, (), 4),
        (10, [range(0, 1), range(2, 4)], 4, (range(1, 2),), 3),
        (10, [range(3, 5), range(7, 10)], 10, (range(0, 3), range(5, 7)), 5),
        (4, [range(0, 4)], 4, (), 4),
    ],
)
def test_a_task_that_reuses_units_starts_past_them(
    count: int, reused: list[range], frontier: int, pending: tuple[range, ...], n: int
) -> None:
    """The frontier goes past the last unit reused; the units below it not reused are
    pending (rows); fresh units stay past the frontier."""
    assert unit_start(count, reused) == UnitStart(frontier, pending, n)


@pytest.mark.parametrize(
    "reused", [[range(2, 4), range(0, 1)], [range(0, 3), range(2, 4)], [range(8, 11)]]
)
def test_unit_start_refuses_ranges_out_of_order_or_past_the_count(reused: list[range]) -> None:
    """Unsorted, overlapping or too-far ranges are a mistake, said at once."""
    with pytest.raises(ValueError, match="sorted, disjoint"):
        unit_start(10, reused)


@pytest.mark.parametrize(
    ("indices", "ranges"),
    [([], []), ([3], [range(3, 4)]), ([5, 1, 2, 3], [range(1, 4), range(5, 6)])],
)
def test_indices_become_ranges(indices: list[int], ranges: list[range]) -> None:
    """Indices become the fewest runs of consecutive ones, in order."""
    assert list(Ranges.of_indices(indices).parts) == ranges


def test_units_reused_text() -> None:
    """'N units reused from RUN', singular for one."""
    assert units_reused_text(3, "r1") == "3 units reused from r1"
    assert units_reused_text(1, "r1") == "1 unit reused from r1"


R3, R2 = UnitsEarlier("r3", "t", 3.0, 6), UnitsEarlier("r2", "t", 2.0, 6)


@pytest.mark.parametrize(
    ("count", "options", "chosen"),
    [
        (6, [], None),
        (6, [(R3, []), (R2, [])], None),  # none gives any unit
        (6, [(R3, [range(0, 2)]), (R2, [range(0, 4)])], ("r2", (range(0, 4),), 4, ())),
        # two give as many: the first (the latest) wins; the gap below the last is pending
        (
            6,
            [(R3, [range(0, 2), range(3, 5)]), (R2, [range(0, 4)])],
            ("r3", (range(0, 2), range(3, 5)), 5, (range(2, 3),)),
        ),
        (6, [(R3, []), (R2, [range(1, 2)])], ("r2", (range(1, 2),), 2, (range(0, 1),))),
        (4, [(R3, [range(0, 4)])], ("r3", (range(0, 4),), 4, ())),  # all: nothing left to run
    ],
)
def test_a_task_takes_its_units_from_the_earlier_task_that_gives_the_most(
    count: int,
    options: list[tuple[UnitsEarlier, list[range]]],
    chosen: tuple[str, tuple[range, ...], int, tuple[range, ...]] | None,
) -> None:
    """The one decision of the service and the dry run: of the few earlier tasks tried
    (latest first), the one that gives the most units, the later one when two give as
    many, none when none gives any; the task then starts past the units it takes."""
    found = take_units(count, options)
    if chosen is None:
        assert found is None
        return
    run, reused, frontier, pending = chosen
    assert found is not None
    assert found.earlier.run == run
    assert found.reused == reused
    assert found.start == UnitStart(frontier, pending, sum(len(r) for r in reused))


@pytest.mark.parametrize(
    ("ranges", "merged"),
    [
        ([], []),
        ([range(0, 1), range(1, 2)], [range(0, 2)]),  # adjacent rows join
        ([range(5, 9), range(0, 3), range(2, 4)], [range(0, 4), range(5, 9)]),
        ([range(3, 3), range(4, 6)], [range(4, 6)]),  # empty ones dropped
    ],
)
def test_done_units_become_sorted_disjoint_ranges(ranges: list[range], merged: list[range]) -> None:
    """The done units of a task (rows and spans) become sorted, disjoint ranges."""
    assert list(Ranges.of(ranges).parts) == merged


def test_covered() -> None:
    """Which indices below a size some range holds (those past it are left out)."""
    assert covered([range(1, 3), range(5, 9)], 6) == [False, True, True, False, False, True]
