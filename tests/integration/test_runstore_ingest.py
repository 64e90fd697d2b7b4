"""How the run store writes a batch of reports (simrun.runstore.ingest and
`RunStore.apply_reports`), and the facts of a task it keeps as it goes, on real SQLite files."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simrun.core.ranges import Ranges
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.states import Limits, UnitRow, unit_after_outcome, unit_index
from simrun.runstore.ingest import all_done, observed_peak_gb, split_reports
from simrun.runstore.rows import Applied, NewJob, NewRun, NewTask
from simrun.runstore.store import RunStore
from tests.support.examples import examples

LIMITS = Limits(max_retries=1, max_kills=1)
UNITS = 6
RELEASED = "the report of its job did not mention it"


def entry(
    job: str,
    outcomes: dict[Any, str],
    attempt: int = 1,
    *,
    task: str = "sweep",
    worker: str = "w1",
    started: float = 50.0,
    peaks: tuple[float, ...] = (0.5,),
    units: int | None = None,
    killed: bool = False,
    kind: str = "chunk",
) -> ReportEntry:
    done = sum(1 for o in outcomes.values() if o == "done")
    return ReportEntry(
        job_id=job,
        run="r1",
        task=task,
        kind=kind,  # type: ignore[arg-type]  # one of the job kinds in every call
        attempt=attempt,
        worker_id=worker,
        outcomes=outcomes,
        report=WorkerReport(
            peak_memory_gb=peaks,
            seconds_per_unit=0.1,
            units=done if units is None else units,
            limit_gb=1.0,
            killed_for_memory=killed,
        ),
        started=started,
        finished=started + 1.0,
    )


def new_run() -> NewRun:
    return NewRun(
        id="r1",
        name=None,
        model="plate",
        document="tasks: []",
        created_s=100.0,
        tasks=(
            NewTask("sweep", "heat", 0, {}, {}, (), True, True),
            NewTask("summary", "report", 1, {}, {}, ("sweep",), False, False),
        ),
    )


# -- the pure decisions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("indices", "ranges"),
    [
        ([], []),
        ([3], [(3, 3)]),
        ([0, 1, 2], [(0, 2)]),
        ([5, 0, 1, 2, 2], [(0, 2), (5, 5)]),
        ([9, 7, 8, 1, 3], [(1, 1), (3, 3), (7, 9)]),
        ([-1], [(-1, -1)]),  # a merge unit
    ],
)
def test_index_ranges(indices: list[int], ranges: list[tuple[int, int]]) -> None:
    """Indices become the fewest inclusive ranges that hold exactly them, ascending."""
    assert Ranges.of_indices(indices).pairs == ranges


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ({0: "done", 1: "done"}, True),
        ({"merge": "done"}, True),
        ({0: "done", 1: "failed"}, False),
        ({0: "stale"}, False),
        ({}, False),  # names no unit: nothing to write set-based
    ],
)
def test_all_done(outcomes: dict[Any, str], expected: bool) -> None:
    """A report is all done when it names units and every one is done."""
    assert all_done(entry("j", outcomes)) is expected


A = entry("a", {0: "done", 1: "done"})
B = entry("b", {2: "failed"})
C = entry("c", {1: "killed"})
D = entry("d", {1: "done"}, task="summary")  # another task: index 1 there is another unit
E = entry("e", {})
F = entry("f", {0: "done"})


@pytest.mark.parametrize(
    ("entries", "fast", "slow"),
    [
        ([A], [A], []),
        ([A, B], [A], [B]),  # disjoint units: each on its own path
        ([A, C], [], [A, C]),  # C names unit 1 of A: both unit by unit, in order
        ([C, A], [], [C, A]),
        ([A, C, D], [D], [A, C]),
        ([E, A], [A], [E]),
        ([F, A, C], [], [F, A, C]),  # F shares unit 0 with A, which goes unit by unit
        ([F, B], [F], [B]),
    ],
)
def test_split_reports(
    entries: list[ReportEntry], fast: list[ReportEntry], slow: list[ReportEntry]
) -> None:
    """All-done reports go set-based unless they share a unit with a report that goes unit
    by unit (directly or through other all-done reports); every report lands on exactly one
    path, in the batch's order."""
    assert split_reports(entries) == (fast, slow)


@pytest.mark.parametrize(
    ("report", "peak"),
    [
        (entry("j", {0: "done"}, peaks=(0.25, 0.75)), 0.75),
        (entry("j", {"command": "done"}, peaks=(1.5,), kind="command"), 1.5),
        (entry("j", {"merge": "done"}, peaks=(3.0,), kind="merge"), None),
        (entry("j", {0: "done", 1: "killed"}, peaks=(2.0,)), None),  # cut at the limit
        (entry("j", {0: "not_run"}, peaks=(2.0,), killed=True), None),
        (entry("j", {0: "not_run"}, peaks=(0.1,), units=0), None),  # nothing ran
        (entry("j", {0: "done"}, peaks=()), None),
    ],
)
def test_observed_peak(report: ReportEntry, peak: float | None) -> None:
    """A report tells the peak of its task: the largest of its processes, except for a
    merge, a kill for memory, or a job whose units never ran."""
    assert observed_peak_gb(report) == peak


# -- the store -----------------------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path):
    s = await RunStore.open(tmp_path / "simrun.db")
    yield s
    await s.close()


async def dispatch(store: RunStore, jobs: list[NewJob]) -> None:
    await store.add_jobs(jobs, now_s=102.0)


def job(first: int, count: int, attempt: int = 1, memory_gb: float = 1.0) -> NewJob:
    indices = tuple(range(first, first + count))
    return NewJob(f"r1:sweep:{first}:{attempt}", "r1", "sweep", "chunk", "cpu", attempt,
                  indices, memory_gb)  # fmt: skip


async def apply(store: RunStore, entries: list[ReportEntry], now_s: float = 60.0) -> Applied:
    async with store.transaction() as conn:
        return await store.apply_reports(entries, conn=conn, limits=LIMITS, now_s=now_s)


async def test_an_all_done_report_finishes_its_units_once(store: RunStore) -> None:
    """An all-done report makes its units done with its worker, start and end times; the
    same report read again changes nothing and does not count as new."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 2_000, now_s=101.0)
    jobs = [job(0, 1_000), job(1_000, 1_000)]
    await dispatch(store, jobs)
    await store.see_jobs({jobs[0].id: ("w0", True)}, 55.0)  # job 0 started before its report
    reports = [
        entry(jobs[0].id, {i: "done" for i in jobs[0].indices}, worker="w1"),
        entry(jobs[1].id, {i: "done" for i in jobs[1].indices}, worker="w2", started=52.0),
    ]
    applied = await apply(store, reports)
    assert (applied.changed, applied.touched) == (2_000, {("r1", "sweep")})
    assert [e.job_id for e in applied.recorded] == [jobs[0].id, jobs[1].id]
    units = await store.units("r1", "sweep")
    assert {u.state for u in units} == {"done"}
    assert {(u.worker, u.started_s, u.finished_s) for u in units[:1_000]} == {("w1", 55.0, 60.0)}
    assert {(u.worker, u.started_s) for u in units[1_000:]} == {("w2", 52.0)}
    assert await store.jobs() == []
    again = await apply(store, reports, now_s=70.0)
    assert (again.changed, again.touched, again.recorded) == (0, set(), [])
    assert {u.finished_s for u in await store.units("r1", "sweep")} == {60.0}


async def test_a_done_report_of_an_older_attempt_still_counts(store: RunStore) -> None:
    """A unit released and not dispatched again since is done by the older attempt's report
    (outputs depend on settings and index only); a unit queued again under a newer attempt
    is left to that attempt (it would write the outputs again while the merge reads them);
    units the report does not name keep their state."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 4, now_s=101.0)
    await dispatch(store, [job(0, 4)])
    await store.release_jobs([job(0, 4).id], "worker gone")
    await dispatch(store, [job(0, 2, attempt=2)])
    applied = await apply(store, [entry(job(0, 4).id, {1: "done", 2: "done"})])
    assert applied.recorded == []  # its job had left flight
    states = {u.index: (u.state, u.attempt) for u in await store.units("r1", "sweep")}
    assert states == {0: ("queued", 2), 1: ("queued", 2), 2: ("done", 1), 3: ("pending", 1)}


async def test_a_report_leaving_units_out_releases_them(store: RunStore) -> None:
    """An all-done report that leaves units of its job out sends those back to pending."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 3, now_s=101.0)
    await dispatch(store, [job(0, 3)])
    applied = await apply(store, [entry(job(0, 3).id, {0: "done", 2: "done"})])
    assert applied.changed == 3
    units = {u.index: u for u in await store.units("r1", "sweep")}
    assert [units[i].state for i in range(3)] == ["done", "pending", "done"]
    assert units[1].error == RELEASED


async def test_task_keeps_kills_peak_and_requested_memory(store: RunStore) -> None:
    """A task counts each kill for memory its units take (a replay keeps them), keeps the
    largest peak of its reports that were not killed, and the largest memory per process
    its chunks were dispatched with."""
    await store.create_run(new_run())
    await store.start_task("r1", "sweep", 4, now_s=101.0)
    await dispatch(store, [job(0, 2, memory_gb=1.0), job(2, 2, memory_gb=1.0)])
    (sweep, summary) = await store.tasks("r1")
    assert (sweep.kills, sweep.requested_gb, sweep.peak_memory_gb) == (0, 1.0, None)
    assert (summary.kills, summary.requested_gb, summary.peak_memory_gb) == (0, None, None)
    await apply(
        store,
        [
            entry(job(0, 2).id, {0: "done", 1: "killed"}, peaks=(0.9,)),
            entry(job(2, 2).id, {2: "done", 3: "done"}, peaks=(0.4, 0.6)),
        ],
    )
    (sweep, _) = await store.tasks("r1")
    assert (sweep.kills, sweep.peak_memory_gb) == (1, 0.6)
    await dispatch(store, [job(1, 1, attempt=2, memory_gb=2.5)])
    await apply(store, [entry(job(1, 1, attempt=2).id, {1: "killed"}, 2, peaks=(2.5,))])
    (sweep, _) = await store.tasks("r1")
    assert (sweep.state, sweep.kills, sweep.requested_gb) == ("running", 2, 2.5)
    unit = (await store.units("r1", "sweep"))[1]
    assert (unit.state, unit.kills) == ("failed", 2)
    await store.set_task("r1", "sweep", state="failed", now_s=80.0)
    await store.replay("r1", now_s=90.0, memory_gb=0.5)
    await dispatch(store, [job(1, 1, attempt=3, memory_gb=0.5)])
    await apply(store, [entry(job(1, 1, attempt=3).id, {1: "done"}, 3, peaks=(0.3,))])
    (sweep, _) = await store.tasks("r1")
    assert (sweep.kills, sweep.requested_gb, sweep.peak_memory_gb) == (2, 2.5, 0.6)
    assert {u.state for u in await store.units("r1", "sweep")} == {"done"}


# -- the set-based path against the rule of core.states--------------------------------------

OUTCOMES = ("done", "failed", "killed", "timeout", "not_run", "stale", "refused")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[tuple[str, int]], list[ReportEntry]]:
    """Units in any state and attempt (those in flight in jobs of 3 units of their attempt),
    and a batch of reports, many all done, on units, attempts and jobs in or out of flight."""
    units = [
        (
            draw(st.sampled_from(("pending", "queued", "running", "done", "failed"))),
            draw(st.integers(1, 2)),
        )
        for _ in range(UNITS)
    ]
    jobs = [f"j{a}-{g}" for a in (1, 2) for g in range(UNITS // 3)] + ["unknown"]
    entries = []
    for n in range(draw(st.integers(1, 5))):
        indices = draw(st.lists(st.integers(0, UNITS - 1), min_size=1, max_size=4, unique=True))
        keys: list[int | str] = [*indices]
        if draw(st.booleans()):
            keys.append("merge")
        if draw(st.booleans()):
            outcomes = dict.fromkeys(keys, "done")
        else:
            outcomes = {k: draw(st.sampled_from(OUTCOMES)) for k in keys}
        entries.append(
            entry(
                draw(st.sampled_from(jobs)),
                outcomes,
                draw(st.integers(1, 2)),
                worker=f"w{n}",
                started=40.0 + n,
                peaks=(draw(st.sampled_from((0.1, 0.2, 0.3))),),
            )
        )
    return units, entries


def expected_after(
    before: dict[int, UnitRow], in_flight: set[str], entries: list[ReportEntry]
) -> tuple[dict[int, UnitRow], int, int, int]:
    """What `unit_after_outcome` gives, report after report and unit after unit, then the
    units of reported jobs in flight that stayed queued or running released; with the
    units the outcomes changed, the units released and the kills taken."""
    units = dict(before)
    changed: set[int] = set()
    kills = 0
    for e in entries:
        for key, outcome in e.outcomes.items():
            index = unit_index(key)
            if index not in units:
                continue
            after = unit_after_outcome(
                units[index], outcome, e.attempt, error=e.errors.get(key) or e.error,
                worker=e.worker_id, limit_gb=e.report.limit_gb, limits=LIMITS, now_s=60.0,
                started_s=e.started,
            )  # fmt: skip
            if after is not None:
                units[index] = after
                changed.add(index)
                kills += outcome == "killed"
    released = 0
    reported = {e.job_id for e in entries} & in_flight
    for index, unit in units.items():
        if unit.job_id in reported and unit.state in ("queued", "running"):
            units[index] = replace(unit, state="pending", worker=None, error=RELEASED)
            released += 1
    return units, len(changed), released, kills


async def check_scenario(
    path: Path, units: list[tuple[str, int]], entries: list[ReportEntry]
) -> None:
    store = await RunStore.open(path)
    try:
        await store.create_run(new_run())
        await store.start_task("r1", "sweep", UNITS, now_s=101.0)
        conn = store.connection
        # The scenario's units each have a row (as units sent back have): the unit-by-unit
        # path of the store; range jobs are tests/integration/test_runstore_ranges.py's.
        await conn.execute(
            "WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?)"
            " INSERT INTO units (run_id, task, idx, kind, state)"
            " SELECT 'r1', 'sweep', i, 'chunk', 'pending' FROM seq",
            (UNITS,),
        )
        await conn.execute(
            "UPDATE tasks SET frontier = units WHERE run_id = 'r1' AND name = 'sweep'"
        )
        flight = {f"j{a}-{i // 3}" for i, (state, a) in enumerate(units) if state != "pending"}
        await conn.executemany(
            "INSERT INTO jobs (id, run_id, task, kind, queue, attempt, units, enqueued_s)"
            " VALUES (?, 'r1', 'sweep', 'chunk', 'cpu', ?, 3, 1)",
            [(j, int(j[1])) for j in sorted(flight)],
        )
        await conn.executemany(
            "UPDATE units SET state = ?, attempt = ?, job_id = ?, memory_gb = 1,"
            " started_s = CASE WHEN ? % 2 THEN 30 END WHERE run_id = 'r1' AND task = 'sweep'"
            " AND idx = ?",
            [(s, a, f"j{a}-{i // 3}", i, i) for i, (s, a) in enumerate(units)],
        )
        before = {u.index: u for u in await store.units("r1", "sweep")}
        want, changed, released, kills = expected_after(before, flight, entries)
        applied = await apply(store, entries)
        assert {u.index: u for u in await store.units("r1", "sweep")} == want
        assert applied.changed == changed + released
        assert applied.touched == ({("r1", "sweep")} if changed else set())
        assert [e.job_id for e in applied.recorded] == list(
            dict.fromkeys(e.job_id for e in entries if e.job_id in flight)
        )
        (sweep, _) = await store.tasks("r1")
        assert sweep.kills == kills
        peaks = [p for e in entries if (p := observed_peak_gb(e)) is not None]
        assert sweep.peak_memory_gb == (max(peaks) if peaks else None)
        assert {j.id for j in await store.jobs()} == flight - {e.job_id for e in entries}
    finally:
        await store.close()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_batch_is_written_as_the_state_rules_say(
    scenario: tuple[list[tuple[str, int]], list[ReportEntry]],
) -> None:
    """Whichever path each report takes, the units end as `unit_after_outcome` applied in
    the batch's order says (done never counted twice, stale and other attempts' failures
    ignored, kills and errors per unit), the unmentioned units of reported jobs are
    released, and the task's kills and peak follow."""
    units, entries = scenario
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(check_scenario(Path(tmp) / "simrun.db", units, entries))
