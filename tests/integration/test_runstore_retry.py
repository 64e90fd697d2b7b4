"""A task's own retry rule in the store: kept with the task, applied to its reports, and a
unit waiting for the delay of its retry left out of what may be dispatched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simrun.core.states import Limits
from simrun.runstore.rows import NewJob
from simrun.runstore.store import RunStore
from tests.integration.test_runstore import entry, new_run

TRACE = "Traceback (most recent call last):\n  ...\n{}: unit fails\n"


@pytest.fixture
async def store(tmp_path: Path):
    s = await RunStore.open(tmp_path / "simrun.db")
    yield s
    await s.close()


async def test_a_task_rule_decides_and_holds_the_retry(store: RunStore) -> None:
    """With `retry_on: [ValueError]` and `retry_delay_s: 5`, a ValueError sends the unit
    back, not dispatchable before 5 s have passed (the units without a delay go at once);
    a KeyError fails the other unit at once although the service allows 5 retries."""
    run = new_run()
    rule = {"retry_on": ["ValueError"], "retry_delay_s": 5.0, "timeout_s": 9.0}
    sweep = dataclasses.replace(run.tasks[0], retry=rule)
    await store.create_run(dataclasses.replace(run, tasks=(sweep, run.tasks[1])))
    (task,) = [t for t in await store.tasks("r1") if t.name == "sweep"]
    assert task.retry == rule
    await store.start_task("r1", "sweep", 3, now_s=101.0)
    await store.add_jobs(
        [NewJob("r1:sweep:0:1", "r1", "sweep", "chunk", "cpu", 1, (0, 1, 2), 1.0)], now_s=102.0
    )
    errors = {0: TRACE.format("ValueError"), 1: TRACE.format("KeyError")}
    async with store.transaction() as conn:
        await store.apply_reports(
            [entry("r1:sweep:0:1", {0: "failed", 1: "failed", 2: "not_run"}, errors=errors)],
            conn=conn, limits=Limits(max_retries=5), now_s=60.0,
        )  # fmt: skip
    states = {u.index: (u.state, u.not_before_s) for u in await store.units("r1", "sweep")}
    assert states == {0: ("pending", 65.0), 1: ("failed", None), 2: ("pending", None)}
    early = await store.pending_rows("r1", "sweep", 10, kind="chunk", now_s=64.9)
    assert [u.index for u in early] == [2]
    due = await store.pending_rows("r1", "sweep", 10, kind="chunk", now_s=65.0)
    assert [u.index for u in due] == [0, 2]
