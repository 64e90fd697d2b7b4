"""The decisions of a dispatch (simrun.service.dispatch), as tables: the probe, the chunk
sizes, the cut of units into jobs, what is written of the task, and the resolve cache."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from simrun.core.states import TaskPhase, UnitRow
from simrun.resources import ResolvedResources
from simrun.runstore.rows import TaskRow
from simrun.service.dispatch import (
    DispatchPlan,
    ResolveCache,
    ResolveKey,
    chunk_limit,
    cut_chunks,
    fresh_chunks,
    plan_dispatch,
    probe_now,
)
from simrun.service.settings import ControllerSettings

HINT = ResolvedResources(0.5, 1.0, 0.0, 0, None, 0, "plugin hint")
LEARNED = replace(HINT, samples=3, source="learned from 1 run", seconds_per_unit=10.0)
SETTINGS = ControllerSettings(store="/s", redis_url="redis://x")  # type: ignore[arg-type]


def task(units: int | None = 100, **more) -> TaskRow:
    fields = dict(
        run="r1", name="sweep", position=0, type="heat", settings={}, inputs={}, depends=(),
        override=None, memory_override_gb=None, splittable=True, has_merge=False,
        state="running", status="", queue="cpu", resource_key="heat/plate",
        resources=None, units=units, started_s=None, finished_s=None,
    )  # fmt: skip
    return TaskRow(**{**fields, **more})  # type: ignore[arg-type]


PROBING = task(phase=TaskPhase.PROBING, status="probing: 4 units first")
PROBE_STATUS = "probing: 4 units first, the other 96 wait for their memory"


@pytest.mark.parametrize(
    ("enabled", "row", "todo", "resolved", "probe_out", "expected"),
    [
        (False, task(), 100, HINT, False, 0),  # --no-probe
        (True, task(), 100, HINT, False, 4),  # nothing learned, nothing sent: probe
        (True, task(), 100, LEARNED, False, 0),  # the key has history
        (True, task(), 90, HINT, False, 0),  # units went out already (before a probe)
        (True, PROBING, 96, HINT, True, -1),  # the probe is out: the rest waits
        (True, PROBING, 98, HINT, True, 2),  # a probe smaller than the processes: topped up
        (True, PROBING, 96, LEARNED, True, -1),  # learned meanwhile: wait for the rest
        (True, PROBING, 96, LEARNED, False, 0),  # every probe unit reported: the rest goes
        (True, PROBING, 96, HINT, False, 0),  # reported without an observation: the hint
        (True, PROBING, 100, HINT, False, 4),  # the probe came back (its worker died)
    ],
)
def test_probe_now(enabled, row, todo, resolved, probe_out, expected):
    """A task of a key with no history probes first (one unit per process, here 4); the
    rest waits while a probe job is in flight, then goes out with what was learned."""
    assert probe_now(enabled, row, todo, 4, resolved, probe_out) == expected


def test_chunk_limit_probe_is_one_unit_per_job():
    assert chunk_limit(SETTINGS, HINT, 100, 4, 64, probe=3) == (1, 3)


def test_chunk_limit_is_within_the_window_and_dispatch_units():
    size, limit = chunk_limit(SETTINGS, LEARNED, 100_000, 4, 2, probe=0)
    assert limit == 2 * size  # the window's room bounds the units sent
    size, limit = chunk_limit(SETTINGS, LEARNED, 100_000, 400, 10_000, probe=0)
    assert limit == max(size, SETTINGS.dispatch_units)  # and one step sends at most these


def unit(index: int, kills: int = 0, memory_gb: float | None = None) -> UnitRow:
    return UnitRow("r1", "sweep", index, "chunk", "pending", 1, None, memory_gb, kills=kills)


def test_cut_chunks_groups_units_by_memory_within_room():
    """Units killed before go in jobs of their own (more memory), the fresh ones first."""
    units = [unit(0), unit(1, kills=1, memory_gb=1.0), unit(2), unit(3)]
    chunks = cut_chunks(units, 1.0, size=2, room=8, todo=100, processes=1)
    assert [[u.index for u in c] for c in chunks] == [[0, 2], [3], [1]]
    assert len(cut_chunks(units, 1.0, size=1, room=2, todo=100, processes=1)) == 2


def test_fresh_chunks_take_their_share_and_the_room():
    assert fresh_chunks(range(10, 100), 20, 10, 8, 1) == [range(10, 20), range(20, 30)]
    assert fresh_chunks(range(10, 100), 50, 10, 2, 1) == [range(10, 20), range(20, 30)]
    # the task's last units taper so that the processes end together
    tail = fresh_chunks(range(90, 100), 10, 10, 8, 2)
    assert sum(len(r) for r in tail) == 10
    assert len(tail) > 1


BLOCKED = task(state="blocked", status="no worker has 8 GiB")


@pytest.mark.parametrize(
    ("row", "problem", "merge", "probe", "todo", "sending", "expected"),
    [
        (task(), "no worker has 8 GiB", False, 0, 100, 10, DispatchPlan("no worker has 8 GiB")),
        (BLOCKED, "no worker has 8 GiB", False, 0, 100, 10, None),  # already said
        (BLOCKED, "no worker has 9 GiB", False, 0, 100, 10, DispatchPlan("no worker has 9 GiB")),
        (task(), None, False, 0, 100, 10, DispatchPlan()),  # nothing to write of the task
        (BLOCKED, None, False, 0, 100, 10, DispatchPlan(None, "running", "")),  # unblocked
        (BLOCKED, None, True, 0, 0, 1, DispatchPlan(None, "merging", "")),
        (task(), None, False, 4, 100, 4, DispatchPlan(None, None, PROBE_STATUS, TaskPhase.PROBING)),
        (PROBING, None, False, 0, 96, 96, DispatchPlan(None, None, "", TaskPhase.USUAL)),
    ],
)
def test_plan_dispatch(row, problem, merge, probe, todo, sending, expected):
    """Jobs no worker fits block the task (said once per problem); jobs that go out lift a
    block, a probe sets the probing phase and says so, the end of a probe clears both."""
    assert plan_dispatch(row, problem, merge, probe, todo, sending) == expected


def test_resolve_cache_forgets_a_key_that_learned():
    cache = ResolveCache(keep=3)
    calls: list[str] = []

    async def resolve(name: str) -> ResolvedResources:
        calls.append(name)
        return HINT

    async def main() -> None:
        a, b = ResolveKey("heat/a", "heat", "{}", None), ResolveKey("heat/b", "heat", "{}", 10)
        await cache.get(a, lambda: resolve("a"))
        await cache.get(a, lambda: resolve("a"))
        await cache.get(b, lambda: resolve("b"))
        assert calls == ["a", "b"]
        cache.forget(["heat/a"])
        await cache.get(a, lambda: resolve("a"))
        await cache.get(b, lambda: resolve("b"))
        assert calls == ["a", "b", "a"]
        for i in range(2):  # past ``keep`` (3): started afresh
            await cache.get(ResolveKey(f"k{i}", "heat", "{}", None), lambda: resolve("k"))
        assert len(cache) == 1

    asyncio.run(main())
