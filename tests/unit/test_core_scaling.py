"""The scaling decision: desired worker containers per queue from the backlog, on tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from simrun.core.scaling import (
    BacklogEntry,
    ContainerShape,
    QueueBacklog,
    ScalePolicy,
    desired_containers,
    slots_per_container,
)

SHAPE = ContainerShape(memory_gb=16, processes=4)
WIDE = ScalePolicy(target_drain_s=600, default_seconds_per_unit=60, max_containers=1000)


def entry(units: int, seconds: float | None, memory_gb: float, key: str = "k") -> BacklogEntry:
    return BacklogEntry(
        key=key, units=units, seconds_per_unit=seconds, memory_per_worker_gb=memory_gb
    )


@dataclass(frozen=True)
class Case:
    entries: tuple[BacklogEntry, ...]
    policy: ScalePolicy
    desired: int
    reason_has: tuple[str, ...] = ()
    shape: ContainerShape = SHAPE


CASES = {
    # An empty backlog asks for the minimum, whatever the minimum is.
    "empty backlog, min 0": Case((), ScalePolicy(min_containers=0), 0, ("empty backlog",)),
    "empty backlog, min 2": Case((), ScalePolicy(min_containers=2), 2, ("minimum 2",)),
    "keys with no units left are an empty backlog": Case(
        (entry(0, 5.0, 1.0), entry(0, None, 2.0, "b")), ScalePolicy(min_containers=1), 1
    ),
    # 10,000 units of 0.05 s are 500 s of work: one container of 4 drains it in 2 minutes.
    "learned fast units need few": Case((entry(10_000, 0.05, 1.0),), WIDE, 1),
    # The same units unknown: 10,000 x 60 s / 600 s / 4 processes = 250.
    "unknown seconds use the default": Case(
        (entry(10_000, None, 1.0),), WIDE, 250, ("10000 at the default 60 s",)
    ),
    "the default is a policy knob": Case(
        (entry(10_000, None, 1.0),),
        ScalePolicy(default_seconds_per_unit=6, max_containers=1000),
        25,
    ),
    # 480 units x 60 s = 28,800 s: 12 containers at 4 processes each, but 8 GiB units fit
    # only 2 at a time in 16 GiB, so 24.
    "big memory needs more": Case(
        (entry(480, 60.0, 8.0),), WIDE, 24, ("memory fit", "2 at a time")
    ),
    "memory that fits every process changes nothing": Case((entry(480, 60.0, 4.0),), WIDE, 12),
    "memory just over a quarter packs 3": Case((entry(480, 60.0, 4.5),), WIDE, 16),
    "memory per process unknown (0) uses every process": Case((entry(480, 60.0, 0.0),), WIDE, 12),
    # A key that cannot fit one process in the container adds nothing, and is named.
    "a unit larger than the container is left out": Case(
        (entry(100, 60.0, 40.0, "huge"),), ScalePolicy(min_containers=1), 1, ("'huge'",)
    ),
    "an unfit key does not hide the others": Case(
        (entry(100, 60.0, 40.0, "huge"), entry(480, 60.0, 4.0)), WIDE, 12, ("left out",)
    ),
    # Keys add up: 240 x 60 s at 4 at a time is 3,600 container-seconds, 240 x 60 s at 2 at
    # a time 7,200; 10,800 / 600 s = 18.
    "keys add their container-seconds": Case(
        (entry(240, 60.0, 4.0, "a"), entry(240, 60.0, 8.0, "b")), WIDE, 18
    ),
    # Three units of an hour each keep one container of 4 busy; more would idle.
    "no more containers than the units keep busy": Case(
        (entry(3, 3600.0, 1.0),), WIDE, 1, ("at most 1 busy",)
    ),
    "parallelism counts memory fit": Case((entry(6, 3600.0, 8.0),), WIDE, 3),
    "clamped to the maximum": Case(
        (entry(10_000, None, 1.0),), ScalePolicy(max_containers=8), 8, ("maximum 8",)
    ),
    "clamped to the minimum": Case(
        (entry(10, 0.1, 1.0),), ScalePolicy(min_containers=3, max_containers=8), 3, ("minimum 3",)
    ),
    # 6 x 0.2 s / 0.3 s is exactly 4, but 4.000000000000001 in floats: must not make it 5.
    "an exact fit is not rounded up": Case(
        (entry(6, 0.2, 1.0),),
        ScalePolicy(target_drain_s=0.3),
        4,
        shape=ContainerShape(memory_gb=4, processes=1),
    ),
    "a shorter drain target needs more": Case(
        (entry(480, 60.0, 4.0),),
        ScalePolicy(target_drain_s=60, max_containers=1000),
        120,
    ),
    "one process per container": Case(
        (entry(100, 60.0, 1.0),), WIDE, 10, shape=ContainerShape(memory_gb=4, processes=1)
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_desired_containers(case: Case) -> None:
    """The desired count is ceil(sum of units x seconds / slots / drain), capped by the
    units' parallelism and clamped to min/max; the reason says what decided it."""
    decision = desired_containers(QueueBacklog("cpu", case.entries), case.shape, case.policy)
    assert decision.desired == case.desired, decision.reason
    assert decision.reason.startswith("cpu: ")
    assert decision.reason.endswith(f"→ {case.desired}")
    for text in case.reason_has:
        assert text in decision.reason


def test_memory_fit_never_asks_for_fewer_than_time() -> None:
    """The count with memory fit is at least the count of the work at full processes."""
    for memory_gb in (0.5, 1.0, 3.9, 4.0, 4.1, 5.5, 8.0, 15.0, 16.0):
        d = desired_containers(QueueBacklog("cpu", (entry(1000, 30.0, memory_gb),)), SHAPE, WIDE)
        assert d.by_memory >= d.by_time, (memory_gb, d)


def test_decision_fields() -> None:
    """The decision carries the work in process-seconds, the unit count and each bound."""
    d = desired_containers(
        QueueBacklog("gpu", (entry(480, 60.0, 8.0), entry(5, 1.0, 99.0, "huge"))), SHAPE, WIDE
    )
    assert (d.queue, d.units, d.work_s) == ("gpu", 480, 28_800.0)
    assert (d.by_time, d.by_memory, d.by_parallelism, d.demand) == (12, 24, 240, 24)
    assert d.unfit == ("huge",)


SLOTS = [
    # (memory per process GiB, container GiB, processes, slots)
    (1.0, 16, 4, 4),
    (4.0, 16, 4, 4),
    (8.0, 16, 4, 2),
    (5.0, 16, 4, 3),
    (16.0, 16, 4, 1),
    (16.5, 16, 4, 0),
    (0.1 + 0.2, 0.9, 8, 3),  # float noise: 0.9 / 0.30000000000000004 is 2.9999999999999996
    (0.0, 16, 4, 4),
]


@pytest.mark.parametrize(("memory", "container", "processes", "slots"), SLOTS)
def test_slots_per_container(memory: float, container: float, processes: int, slots: int) -> None:
    """A container runs min(processes, floor(memory / memory per process)) units at once."""
    assert slots_per_container(memory, ContainerShape(container, processes)) == slots


BAD = {
    "negative units": lambda: entry(-1, 1.0, 1.0),
    # A float where an int belongs, on purpose: the check must hold for untyped callers.
    "fractional units": lambda: BacklogEntry("k", 1.5, 1.0, 1.0),  # type: ignore[arg-type]
    "negative seconds": lambda: entry(1, -1.0, 1.0),
    "infinite seconds": lambda: entry(1, float("inf"), 1.0),
    "negative memory": lambda: entry(1, 1.0, -2.0),
    "nan memory": lambda: entry(1, 1.0, float("nan")),
    "container without memory": lambda: ContainerShape(0, 4),
    "container without processes": lambda: ContainerShape(16, 0),
    "zero drain target": lambda: ScalePolicy(target_drain_s=0),
    "zero default seconds": lambda: ScalePolicy(default_seconds_per_unit=0),
    "negative minimum": lambda: ScalePolicy(min_containers=-1),
    "minimum over maximum": lambda: ScalePolicy(min_containers=5, max_containers=4),
}


@pytest.mark.parametrize("make", BAD.values(), ids=BAD.keys())
def test_bad_inputs_are_refused(make: object) -> None:
    """A backlog, shape or policy that makes no sense raises ValueError naming the field."""
    assert callable(make)
    with pytest.raises(ValueError, match=r"must be|is more than"):
        make()
