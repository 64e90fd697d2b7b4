"""The run store (simrun.runstore) on real SQLite files."""

from __future__ import annotations

from pathlib import Path

import aiosqlite
import pytest

from simrun import db
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.states import Limits, TaskCounts
from simrun.resources import ResourceKey, ResourceStore
from simrun.resources.store import Record
from simrun.runstore.rows import NewJob, NewRun, NewTask, RunStateError, UnknownRunError
from simrun.runstore.schema import COMPONENT, MIGRATIONS
from simrun.runstore.store import RunStore

LIMITS = Limits(max_retries=1, max_kills=2)


def new_run(run_id: str = "r1") -> NewRun:
    return NewRun(
        id=run_id,
        name="demo",
        model="plate",
        document="tasks: []",
        created_s=100.0,
        tasks=(
            NewTask("sweep", "heat", 0, {"grid": 8}, {"plate": "/s/plate.json"}, (), True, True),
            NewTask(
                "summary", "report", 1, {}, {"table": "/s/sweep/out"}, ("sweep",), False, False
            ),
        ),
    )


def entry(job: str, outcomes: dict, attempt: int = 1, task: str = "sweep", errors=None, **kw):
    return ReportEntry(
        job_id=job,
        run="r1",
        task=task,
        kind=kw.pop("kind", "chunk"),
        attempt=attempt,
        worker_id="w1",
        outcomes=outcomes,
        report=WorkerReport(
            peak_memory_gb=(0.5,),
            seconds_per_unit=0.1,
            units=len(outcomes),
            limit_gb=1.0,
            killed_for_memory=kw.pop("killed", False),
        ),
        started=50.0,
        finished=51.0,
        errors=errors or {},
    )


@pytest.fixture
async def store(tmp_path: Path):
    s = await RunStore.open(tmp_path / "simrun.db")
    yield s
    await s.close()


async def dispatched(store: RunStore, units: int = 6, per_job: int = 3) -> list[NewJob]:
    """A run whose sweep has ``units`` units, all dispatched in jobs of ``per_job``."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", units, now_s=101.0)
    jobs = [
        NewJob(
            f"r1:sweep:{i}:1", "r1", "sweep", "chunk", "cpu", 1, tuple(range(i, i + per_job)), 1.0
        )
        for i in range(0, units, per_job)
    ]
    await store.add_jobs(jobs, now_s=102.0)
    return jobs


async def test_schema_is_versioned_and_wal(tmp_path: Path):
    """The store migrates its component to the latest version once, in a WAL file."""
    path = tmp_path / "simrun.db"
    for _ in range(2):  # the second open finds the schema in place
        s = await RunStore.open(path)
        await s.close()
    async with aiosqlite.connect(path) as conn:
        assert await db.component_version(conn, COMPONENT) == len(MIGRATIONS)
        row = await (await conn.execute("PRAGMA journal_mode")).fetchone()
        assert row is not None
        assert row[0] == "wal"
        indexes = await conn.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'units_pending'"
        )
        assert list(indexes) == [("units_pending",)]  # what the dispatcher reads


async def test_create_and_read_run(store: RunStore):
    """A created run is running with its tasks waiting, in topological order."""
    await store.create_run(new_run())
    run = await store.run("r1")
    assert run is not None
    assert (run.state, run.model, run.name) == ("running", "plate", "demo")
    tasks = await store.tasks("r1")
    assert [(t.name, t.state, t.splittable, t.has_merge) for t in tasks] == [
        ("sweep", "waiting", True, True),
        ("summary", "waiting", False, False),
    ]
    assert tasks[1].depends == ("sweep",)
    assert tasks[0].inputs == {"plate": "/s/plate.json"}
    assert [r.id for r in await store.runs()] == ["r1"]
    assert await store.runs(states=["failed"]) == []
    assert await store.run("nope") is None


async def test_create_run_is_all_or_nothing(store: RunStore):
    """A run whose tasks cannot all be stored leaves nothing behind."""
    run = new_run()
    twice = NewRun(**{**run.__dict__, "tasks": (run.tasks[0], run.tasks[0])})
    with pytest.raises(aiosqlite.IntegrityError):
        await store.create_run(twice)
    assert await store.run("r1") is None


async def test_start_task_creates_many_units(store: RunStore):
    """Starting a task makes its units pending in one batch, 20,000 of them."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 20_000, now_s=101.0)
    counts = await store.counts("r1")
    assert counts["sweep"] == TaskCounts(pending=20_000)
    _, pending = await store.unit_page("r1", "sweep", "pending", 0, 3)
    assert [u.index for u in pending] == [0, 1, 2]
    assert await store.pending_counts("r1") == {"sweep": {"chunk": 20_000}}
    (sweep,) = [t for t in await store.tasks("r1") if t.name == "sweep"]
    assert (sweep.state, sweep.units) == ("running", 20_000)


async def test_start_task_checks_its_input(store: RunStore):
    """A command task takes exactly one unit, and a started task cannot start again."""
    await store.create_run(new_run())
    with pytest.raises(ValueError, match="cannot start with 2 units"):
        await store.start_task("r1", "summary", 2, now_s=1.0)
    await store.start_task("r1", "summary", 1, now_s=1.0)
    (unit,) = await store.units("r1", "summary")
    assert (unit.kind, unit.key) == ("command", "command")
    with pytest.raises(ValueError, match="is running"):
        await store.start_task("r1", "summary", 1, now_s=1.0)
    with pytest.raises(KeyError, match="nope"):
        await store.start_task("r1", "nope", 1, now_s=1.0)


async def test_add_jobs_queues_units(store: RunStore):
    """Dispatching moves units to queued with the job's attempt, id and memory, and counts
    the jobs in flight per queue."""
    jobs = await dispatched(store)
    units = await store.units("r1", "sweep")
    assert {(u.state, u.attempt, u.memory_gb) for u in units} == {("queued", 1, 1.0)}
    assert [u.job_id for u in units[:3]] == [jobs[0].id] * 3
    assert await store.jobs_in_flight() == {"cpu": 2}
    assert [j.id for j in await store.jobs("r1")] == [j.id for j in jobs]


async def test_add_jobs_refuses_units_not_pending(store: RunStore):
    """A job naming a unit that is not pending is refused, and nothing of the batch is
    written."""
    await dispatched(store)
    await store.start_task("r1", "summary", 1, now_s=1.0)
    good = NewJob("r1:summary:command:1", "r1", "summary", "command", "cpu", 1, (0,), 2.0)
    bad = NewJob("r1:sweep:0:2", "r1", "sweep", "chunk", "cpu", 2, (0,), 2.0)
    with pytest.raises(ValueError, match="only 1 of 2 units were pending"):
        await store.add_jobs([good, bad], now_s=1.0)
    assert (await store.units("r1", "summary"))[0].state == "pending"
    assert await store.jobs_in_flight() == {"cpu": 2}


async def test_reports_move_units_and_close_jobs(store: RunStore):
    """A batch of reports applies each unit's outcome, takes its jobs out of flight and
    hands back the measurements of jobs that were in flight, once."""
    jobs = await dispatched(store)
    reports = [
        entry(jobs[0].id, {0: "done", 1: "failed", 2: "killed"}, errors={1: "Traceback: boom"}),
        entry(jobs[1].id, {3: "done", 4: "done", 5: "not_run"}),
    ]
    async with store.transaction() as conn:
        applied = await store.apply_reports(reports, conn=conn, limits=LIMITS, now_s=60.0)
    assert [e.job_id for e in applied.recorded] == [jobs[0].id, jobs[1].id]
    assert applied.touched == {("r1", "sweep")}
    assert applied.changed == 6
    by_index = {u.index: u for u in await store.units("r1", "sweep")}
    assert [by_index[i].state for i in range(6)] == [
        "done", "pending", "pending", "done", "done", "pending"
    ]  # fmt: skip
    assert (by_index[1].errors, by_index[1].error) == (1, "Traceback: boom")
    assert by_index[2].kills == 1
    assert by_index[0].started_s == 50.0
    assert await store.jobs_in_flight() == {}
    # the same entries read again (a restart before the acknowledgement) change nothing
    async with store.transaction() as conn:
        again = await store.apply_reports(reports, conn=conn, limits=LIMITS, now_s=61.0)
    assert (again.recorded, again.changed) == ([], 0)


async def test_unmentioned_units_of_a_reported_job_are_released(store: RunStore):
    """A unit that its job's report leaves out goes back to pending, not lost."""
    jobs = await dispatched(store)
    async with store.transaction() as conn:
        await store.apply_reports(
            [entry(jobs[0].id, {0: "done"})], conn=conn, limits=LIMITS, now_s=60.0
        )
    by_index = {u.index: u for u in await store.units("r1", "sweep")}
    assert [by_index[i].state for i in range(3)] == ["done", "pending", "pending"]
    assert by_index[1].error == "the report of its job did not mention it"


async def test_errors_fail_a_unit_after_the_retries(store: RunStore):
    """A unit that keeps failing is failed with its last traceback once retries run out."""
    await dispatched(store, units=1, per_job=1)
    async with store.transaction() as conn:
        await store.apply_reports(
            [entry("r1:sweep:0:1", {0: "failed"}, errors={0: "first"})],
            conn=conn, limits=LIMITS, now_s=60.0,
        )  # fmt: skip
    await store.add_jobs(
        [NewJob("r1:sweep:0:2", "r1", "sweep", "chunk", "cpu", 2, (0,), 1.0)], now_s=61.0
    )
    async with store.transaction() as conn:
        await store.apply_reports(
            [entry("r1:sweep:0:2", {0: "failed"}, attempt=2, errors={0: "second"})],
            conn=conn, limits=LIMITS, now_s=62.0,
        )  # fmt: skip
    (unit,) = await store.units("r1", "sweep")
    assert (unit.state, unit.errors, unit.error, unit.attempt) == ("failed", 2, "second", 2)


async def test_reports_and_observations_share_a_transaction(store: RunStore, tmp_path: Path):
    """Unit states and observations written in one transaction are rolled back together."""
    jobs = await dispatched(store)
    resources = ResourceStore(store.path)
    await resources.ensure_schema(store.connection)
    key = ResourceKey("heat", "plate", "8")
    report = [entry(jobs[0].id, {0: "done", 1: "done", 2: "done"})]
    record = [
        Record(
            key,
            WorkerReport(peak_memory_gb=(0.5,), seconds_per_unit=0.1, units=3, limit_gb=1.0),
            0.5,
        )
    ]

    async def write_both(crash: bool) -> None:
        async with store.transaction() as conn:
            await store.apply_reports(report, conn=conn, limits=LIMITS, now_s=60.0)
            await resources.record_many(record, conn)
            if crash:
                raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError, match="crash"):
        await write_both(crash=True)
    assert {u.state for u in await store.units("r1", "sweep")} == {"queued"}
    assert await resources.history(key) == []
    await write_both(crash=False)
    assert len(await resources.history(key)) == 1
    assert (await store.counts("r1"))["sweep"].done == 3


async def test_apply_reports_needs_a_transaction(store: RunStore):
    """Applying reports outside a transaction is refused (it would not be atomic)."""
    with pytest.raises(RuntimeError, match="not in a transaction"):
        await store.apply_reports([], conn=store.connection, limits=LIMITS, now_s=1.0)


async def test_sightings_and_release(store: RunStore):
    """Heartbeats mark a job's units running on their worker; releasing a job puts its
    unfinished units back to pending with the reason, and the job leaves flight."""
    jobs = await dispatched(store)
    changed = await store.see_jobs({jobs[0].id: ("w1", True), jobs[1].id: ("w2", False)}, 70.0)
    assert changed == 6
    assert await store.see_jobs({jobs[0].id: ("w1", True)}, 71.0) == 0  # nothing new
    units = {u.index: u for u in await store.units("r1", "sweep")}
    assert (units[0].state, units[0].worker, units[0].started_s) == ("running", "w1", 70.0)
    assert (units[3].state, units[3].worker) == ("queued", "w2")
    assert {j.id: j.worker for j in await store.jobs()} == {jobs[0].id: "w1", jobs[1].id: "w2"}
    released = await store.release_jobs([jobs[0].id], "worker w1 stopped answering")
    assert released == 3
    units = {u.index: u for u in await store.units("r1", "sweep")}
    assert (units[0].state, units[0].error) == ("pending", "worker w1 stopped answering")
    assert [j.id for j in await store.jobs()] == [jobs[1].id]


async def test_merge_unit_is_made_once(store: RunStore):
    """The merge unit of a task is created once and counted apart from its units."""
    await dispatched(store)
    await store.add_merge_unit("r1", "sweep")
    await store.add_merge_unit("r1", "sweep")
    counts = (await store.counts("r1"))["sweep"]
    assert (counts.queued, counts.merge) == (6, "pending")
    assert await store.pending_counts("r1") == {"sweep": {"merge": 1}}
    (merge,) = await store.pending_rows("r1", "sweep", 10, kind="merge")
    assert merge.key == "merge"


async def failed_run(store: RunStore) -> None:
    jobs = await dispatched(store)
    strict = Limits(max_retries=0, max_kills=0)
    async with store.transaction() as conn:
        await store.apply_reports(
            [entry(jobs[0].id, {0: "done", 1: "failed", 2: "done"}, errors={1: "tb"}),
             entry(jobs[1].id, {3: "done", 4: "killed", 5: "done"})],
            conn=conn, limits=strict, now_s=60.0,
        )  # fmt: skip
        await store.set_task("r1", "sweep", state="failed", now_s=60.0, conn=conn)
        await store.set_run_state("r1", "failed", "units failed", 60.0, conn=conn)


async def test_replay_puts_failed_units_back(store: RunStore):
    """Replay makes failed units pending with fresh counts, the task and the run running
    again, and never touches done units."""
    await failed_run(store)
    assert await store.replay("r1", now_s=70.0, memory_gb=3.0) == 2
    units = {u.index: u for u in await store.units("r1", "sweep")}
    assert [units[i].state for i in range(6)] == [
        "done",
        "pending",
        "done",
        "done",
        "pending",
        "done",
    ]
    assert (units[1].errors, units[4].kills) == (0, 0)
    (sweep, _) = await store.tasks("r1")
    assert (sweep.state, sweep.memory_override_gb) == ("running", 3.0)
    run = await store.run("r1")
    assert run is not None
    assert (run.state, run.finished_s) == ("running", None)


async def test_replay_some_indices(store: RunStore):
    """Replay of chosen indices replays only those."""
    await failed_run(store)
    assert await store.replay("r1", now_s=70.0, task="sweep", indices=[4]) == 1
    states = {u.index: u.state for u in await store.units("r1", "sweep")}
    assert (states[1], states[4]) == ("failed", "pending")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "sweep", "indices": [0]}, r"units \[0\] are not failed"),
        ({"task": "nope"}, "has no task 'nope'"),
        ({"indices": [1]}, "need a task"),
        ({"task": "summary"}, "task 'summary' of run 'r1' has no failed units"),
        ({"memory_gb": 0.0}, "memory_gb must be more than 0"),
    ],
)
async def test_replay_refuses_with_a_reason(store: RunStore, kwargs, message):
    """A replay that cannot be done says why, and changes nothing."""
    await failed_run(store)
    with pytest.raises(RunStateError, match=message):
        await store.replay("r1", now_s=70.0, **kwargs)
    run = await store.run("r1")
    assert run is not None
    assert run.state == "failed"


async def test_replay_unknown_run(store: RunStore):
    """Replaying or cancelling a run that does not exist names it, with the error of an
    unknown run (not that of a run in the wrong state)."""
    with pytest.raises(UnknownRunError, match="no run 'zz'"):
        await store.replay("zz", now_s=1.0)
    with pytest.raises(UnknownRunError, match="no run 'zz'"):
        await store.cancel("zz", now_s=1.0)


async def test_cancel(store: RunStore):
    """Cancel ends the run, cancels unfinished tasks, empties its jobs in flight and returns
    the units that were in flight; a second cancel is refused."""
    jobs = await dispatched(store)
    await store.see_jobs({jobs[0].id: ("w1", True)}, 70.0)
    active = await store.cancel("r1", now_s=80.0)
    assert sorted(u.index for u in active) == [0, 1, 2, 3, 4, 5]
    run = await store.run("r1")
    assert run is not None
    assert (run.state, run.finished_s) == ("cancelled", 80.0)
    assert {t.state for t in await store.tasks("r1")} == {"cancelled"}
    assert await store.jobs() == []
    assert {u.state for u in await store.units("r1")} == {"pending"}
    with pytest.raises(RunStateError, match="already ended"):
        await store.cancel("r1", now_s=81.0)
    with pytest.raises(RunStateError, match="was cancelled"):
        await store.replay("r1", now_s=82.0)


async def test_reads_see_only_committed_state(store: RunStore):
    """Reads (on their own connection) never see a transaction that is not committed."""
    await store.create_run(new_run())
    async with store.transaction() as conn:
        await store.set_run_state("r1", "failed", "x", 5.0, conn=conn)
        run = await store.run("r1")
        assert run is not None
        assert run.state == "running"
    run = await store.run("r1")
    assert run is not None
    assert run.state == "failed"


async def test_orphaned_units_are_released(store: RunStore):
    """Units left queued without their job in flight go back to pending; units of jobs in
    flight stay."""
    jobs = await dispatched(store)
    async with store.transaction() as conn:
        await conn.execute("DELETE FROM jobs WHERE id = ?", (jobs[0].id,))
    assert await store.release_orphans() == 3
    states = {u.index: u.state for u in await store.units("r1", "sweep")}
    assert states == {
        0: "pending",
        1: "pending",
        2: "pending",
        3: "queued",
        4: "queued",
        5: "queued",
    }
    assert await store.release_orphans() == 0
