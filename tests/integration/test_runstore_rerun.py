"""`RunStore.rerun` (``simrun replay --task T --all``) on real SQLite files: a task that ran
goes back to waiting with no unit, with every task that reads it; the run runs again."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.core.states import Limits
from simrun.runstore.rows import NewJob, RunStateError, UnknownRunError
from simrun.runstore.store import RunStore
from tests.integration.test_runstore import entry, new_run


@pytest.fixture
async def store(tmp_path: Path):
    s = await RunStore.open(tmp_path / "simrun.db")
    yield s
    await s.close()


async def succeeded(store: RunStore) -> None:
    """Run r1 whose sweep (4 units in one range job, and its merge) and summary are done."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 4, now_s=101.0)
    job = NewJob("r1:sweep:0:1", "r1", "sweep", "chunk", "cpu", 1, range(4), 1.0, fresh=True)
    await store.add_jobs([job], now_s=102.0)
    async with store.transaction() as conn:
        await store.apply_reports(
            [entry(job.id, dict.fromkeys(range(4), "done"))],
            conn=conn, limits=Limits(), now_s=103.0,
        )  # fmt: skip
    await store.add_merge_unit("r1", "sweep")
    await store.set_task("r1", "sweep", state="done", now_s=104.0)
    await store.start_task("r1", "summary", 1, now_s=105.0)
    await store.set_task("r1", "summary", state="done", now_s=106.0)
    await store.set_run_state("r1", "succeeded", "", 106.0)


async def test_a_succeeded_task_and_its_readers_go_back_to_waiting(store: RunStore) -> None:
    """Rerunning sweep resets sweep and summary: waiting, no unit row, no span, no count,
    frontier 0; sweep gets the memory asked for; the run is running again."""
    await succeeded(store)
    assert (await store.counts("r1"))["sweep"].done == 4
    tasks, units = await store.rerun("r1", "sweep", now_s=200.0, memory_gb=2.5)
    assert (tasks, units) == (["sweep", "summary"], 5)
    rows = {t.name: t for t in await store.tasks("r1")}
    for name in ("sweep", "summary"):
        t = rows[name]
        assert (t.state, t.units, t.started_s, t.finished_s) == ("waiting", None, None, None)
        assert (t.frontier, t.spans_done) == (0, 0)
    assert rows["sweep"].memory_override_gb == 2.5
    assert rows["summary"].memory_override_gb is None
    assert await store.units("r1") == []
    run = await store.run("r1")
    assert run is not None
    assert (run.state, run.finished_s) == ("running", None)
    # It starts again as a task never started does.
    await store.start_task("r1", "sweep", 4, now_s=201.0)
    assert (await store.counts("r1"))["sweep"].pending == 4


async def test_a_reader_reruns_alone(store: RunStore) -> None:
    """Rerunning summary leaves sweep, which it reads, done."""
    await succeeded(store)
    assert await store.rerun("r1", "summary", now_s=200.0) == (["summary"], 1)
    rows = {t.name: t.state for t in await store.tasks("r1")}
    assert rows == {"sweep": "done", "summary": "waiting"}
    assert (await store.counts("r1"))["sweep"].done == 4


async def test_rerun_refuses_with_a_reason(store: RunStore) -> None:
    """A task still running, one that never ran, an unknown task or run, a cancelled run:
    each refused naming why, and nothing changes."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 4, now_s=101.0)
    await store.add_jobs(
        [NewJob("r1:sweep:0:1", "r1", "sweep", "chunk", "cpu", 1, range(2), 1.0, fresh=True)],
        now_s=102.0,
    )
    with pytest.raises(RunStateError, match="task 'sweep' of run 'r1' is still running"):
        await store.rerun("r1", "sweep", now_s=103.0)
    with pytest.raises(RunStateError, match="task 'summary' of run 'r1' has not run yet"):
        await store.rerun("r1", "summary", now_s=103.0)
    with pytest.raises(RunStateError, match="has no task 'nope'"):
        await store.rerun("r1", "nope", now_s=103.0)
    with pytest.raises(UnknownRunError, match="no run 'zz'"):
        await store.rerun("zz", "sweep", now_s=103.0)
    assert (await store.counts("r1"))["sweep"].total == 4
    await store.cancel("r1", now_s=104.0)
    with pytest.raises(RunStateError, match="was cancelled"):
        await store.rerun("r1", "sweep", now_s=105.0)
