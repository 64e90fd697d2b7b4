"""Units as ranges in the run store, on real SQLite files: a chunk unit has a row only
when it has something of its own; fresh units are a frontier, range jobs and spans."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.states import Limits, TaskCounts, UnitRow
from simrun.runstore.rows import NewJob, NewRun, NewTask
from simrun.runstore.store import RunStore

LIMITS = Limits(max_retries=1, max_kills=1)


def new_run(run_id: str = "r1") -> NewRun:
    return NewRun(
        id=run_id,
        name=None,
        model="plate",
        document="tasks: []",
        created_s=100.0,
        tasks=(NewTask("sweep", "heat", 0, {}, {}, (), True, False),),
    )


def fresh_job(first: int, last: int, attempt: int = 1, gb: float = 1.0) -> NewJob:
    return NewJob(
        id=f"j{first}-{last}:{attempt}",
        run="r1",
        task="sweep",
        kind="chunk",
        queue="cpu",
        attempt=attempt,
        indices=range(first, last + 1),
        memory_gb=gb,
        fresh=True,
    )


def row_job(indices: list[int], attempt: int, job_id: str, gb: float = 1.0) -> NewJob:
    return NewJob(
        id=job_id,
        run="r1",
        task="sweep",
        kind="chunk",
        queue="cpu",
        attempt=attempt,
        indices=tuple(indices),
        memory_gb=gb,
    )


def entry(job_id: str, outcomes: dict[Any, str], attempt: int = 1, worker: str = "w1"):
    return ReportEntry(
        job_id=job_id,
        run="r1",
        task="sweep",
        kind="chunk",
        attempt=attempt,
        worker_id=worker,
        outcomes=outcomes,
        report=WorkerReport(
            peak_memory_gb=(0.5,), seconds_per_unit=0.1, units=len(outcomes), limit_gb=1.0
        ),
        started=40.0,
        finished=41.0,
        errors={k: "boom" for k, o in outcomes.items() if o == "failed"},
    )


async def apply(store: RunStore, entries: list[ReportEntry], now_s: float = 60.0):
    async with store.transaction() as conn:
        return await store.apply_reports(entries, conn=conn, limits=LIMITS, now_s=now_s)


async def unit_rows(store: RunStore) -> int:
    rows = await store.connection.execute_fetchall("SELECT count(*) FROM units")
    return int(next(iter(rows))[0])


def counts_of_listing(units: list[UnitRow]) -> TaskCounts:
    by_state = Counter(u.state for u in units)
    return TaskCounts.of(dict(by_state))


@pytest.fixture
async def store(tmp_path: Path):
    s = await RunStore.open(tmp_path / "simrun.db")
    await s.create_run(new_run())
    try:
        yield s
    finally:
        await s.close()


async def test_a_million_units_start_without_a_row_each(store: RunStore, tmp_path: Path):
    """Starting a task of 1,000,000 units writes no unit row: its counts, pending counts
    and fresh units come from the task's counters, and the file stays small."""
    await store.start_task("r1", "sweep", 1_000_000, now_s=101.0)
    assert await unit_rows(store) == 0
    assert await store.counts("r1") == {"sweep": TaskCounts(pending=1_000_000)}
    assert await store.pending_counts("r1") == {"sweep": {"chunk": 1_000_000}}
    assert await store.fresh_units("r1", "sweep") == range(1_000_000)
    await store.checkpoint()
    assert (tmp_path / "simrun.db").stat().st_size < 1_000_000


async def test_fresh_jobs_move_the_frontier_and_must_be_the_next_units(store: RunStore):
    """A fresh job takes the next units from the frontier, which moves past them; one that
    does not start at the frontier, or goes past the task's units, is refused and nothing
    of the batch is written."""
    await store.start_task("r1", "sweep", 10, now_s=101.0)
    await store.add_jobs([fresh_job(0, 3), fresh_job(4, 6)], now_s=102.0)
    assert await store.fresh_units("r1", "sweep") == range(7, 10)
    assert await store.counts("r1") == {"sweep": TaskCounts(pending=3, queued=7)}
    for bad in ([fresh_job(8, 9)], [fresh_job(7, 8), fresh_job(8, 10)], [fresh_job(7, 10)]):
        with pytest.raises(ValueError, match="not the next fresh ones"):
            await store.add_jobs(bad, now_s=103.0)
        assert await store.fresh_units("r1", "sweep") == range(7, 10)
        assert len(await store.jobs("r1")) == 2
    assert await unit_rows(store) == 0


async def test_a_range_job_done_whole_becomes_a_span(store: RunStore):
    """A report that says every unit of a range job in flight is done makes a span: no
    unit row, the units listed done with the job's attempt, memory and the report's
    worker and start time, the job out of flight; a second reading changes nothing."""
    await store.start_task("r1", "sweep", 6, now_s=101.0)
    await store.add_jobs([fresh_job(0, 2, gb=2.0), fresh_job(3, 5)], now_s=102.0)
    assert await store.see_jobs({"j0-2:1": ("w1", True)}, now_s=103.0) == 3
    assert await store.counts("r1") == {"sweep": TaskCounts(queued=3, running=3)}
    report = entry("j0-2:1", dict.fromkeys(range(3), "done"))
    applied = await apply(store, [report])
    assert (applied.changed, applied.touched) == (3, {("r1", "sweep")})
    assert [e.job_id for e in applied.recorded] == ["j0-2:1"]
    assert await unit_rows(store) == 0
    done = await store.units("r1", "sweep", states=["done"])
    seen = [(u.index, u.attempt, u.memory_gb, u.worker, u.started_s, u.finished_s) for u in done]
    assert seen == [(i, 1, 2.0, "w1", 103.0, 60.0) for i in range(3)]
    assert [j.id for j in await store.jobs("r1")] == ["j3-5:1"]
    again = await apply(store, [report])
    assert (again.changed, again.recorded) == (0, [])
    assert await store.counts("r1") == {"sweep": TaskCounts(queued=3, done=3)}


async def test_a_range_job_with_a_failure_gets_rows(store: RunStore):
    """A report of a range job that is not all done gives its units rows: the failed unit
    goes back to pending with its error (to be retried), the done ones are done, a unit
    the report left out goes back to pending; the other range jobs keep no rows."""
    await store.start_task("r1", "sweep", 8, now_s=101.0)
    await store.add_jobs([fresh_job(0, 3), fresh_job(4, 7)], now_s=102.0)
    await apply(store, [entry("j0-3:1", {0: "done", 1: "failed", 2: "done"})])
    rows = await store.connection.execute_fetchall(
        "SELECT idx, state, errors, error FROM units ORDER BY idx"
    )
    assert [tuple(r) for r in rows] == [
        (0, "done", 0, None),
        (1, "pending", 1, "boom"),
        (2, "done", 0, None),
        (3, "pending", 0, "the report of its job did not mention it"),
    ]
    assert await store.counts("r1") == {"sweep": TaskCounts(pending=2, queued=4, done=2)}
    assert [u.index for u in await store.pending_rows("r1", "sweep", 10)] == [1, 3]


async def test_a_released_range_job_gets_rows_and_a_newer_attempt(store: RunStore):
    """Giving up a range job (its worker died) gives its units pending rows with the
    reason; they go out again with a newer attempt as a job of rows, and a late report of
    the old attempt counts only for what the rule allows (done is taken while no other
    attempt is in flight)."""
    await store.start_task("r1", "sweep", 4, now_s=101.0)
    await store.add_jobs([fresh_job(0, 3)], now_s=102.0)
    await store.see_jobs({"j0-3:1": ("w1", True)}, now_s=103.0)
    assert await store.release_jobs(["j0-3:1"], "its worker died") == 4
    _, pending = await store.unit_page("r1", "sweep", "pending", 0, 10)
    assert [(u.index, u.attempt, u.error) for u in pending] == [
        (i, 1, "its worker died") for i in range(4)
    ]
    await store.add_jobs([row_job([0, 1], 2, "again")], now_s=104.0)
    await apply(store, [entry("j0-3:1", dict.fromkeys(range(4), "done"))])
    by_index = {u.index: u for u in await store.units("r1", "sweep")}
    assert [(by_index[i].state, by_index[i].attempt) for i in range(4)] == [
        ("queued", 2), ("queued", 2), ("done", 1), ("done", 1),
    ]  # fmt: skip


async def test_cancel_returns_the_units_of_range_jobs(store: RunStore):
    """Cancelling a run returns the units of its range jobs in flight as they were (so the
    workers can be told they are stale) and sends them back to pending; fresh units are
    left as they are."""
    await store.start_task("r1", "sweep", 10, now_s=101.0)
    await store.add_jobs([fresh_job(0, 1), fresh_job(2, 3)], now_s=102.0)
    await store.see_jobs({"j2-3:1": ("w2", True)}, now_s=103.0)
    active = await store.cancel("r1", now_s=104.0)
    assert [(u.index, u.state, u.worker, u.attempt) for u in active] == [
        (0, "queued", None, 1), (1, "queued", None, 1), (2, "running", "w2", 1),
        (3, "running", "w2", 1),
    ]  # fmt: skip
    assert await store.jobs("r1") == []
    assert await store.counts("r1") == {"sweep": TaskCounts(pending=10)}


# -- the same story with range jobs and with rows -------------------------------------------

UNITS = 9
OUTCOMES = st.sampled_from(["done", "failed", "killed", "not_run", "timeout", None])


@st.composite
def stories(draw: st.DrawFn) -> dict[str, Any]:
    """Jobs of 3 units; some seen running, some released, reports (maybe twice, maybe
    naming only some units) for others, then the units sent back dispatched again and
    reported on."""
    jobs = [(i, i + 2) for i in range(0, UNITS, 3)]
    seen = draw(st.lists(st.booleans(), min_size=3, max_size=3))
    released = draw(st.lists(st.booleans(), min_size=3, max_size=3))
    reports = []
    for first, last in jobs:
        outcomes = {i: draw(OUTCOMES) for i in range(first, last + 1)}
        reports.append({i: o for i, o in outcomes.items() if o is not None})
    twice = draw(st.booleans())
    second = {i: draw(OUTCOMES) for i in range(UNITS)}
    return {"jobs": jobs, "seen": seen, "released": released, "reports": reports,
            "twice": twice, "second": second}  # fmt: skip


async def play(path: Path, story: dict[str, Any], fresh: bool) -> tuple[list[UnitRow], Any]:
    """The story on a new store, its first jobs as range jobs (``fresh``) or as jobs of
    unit rows; the units listed at the end, and the counts."""
    store = await RunStore.open(path)
    try:
        await store.create_run(new_run())
        await store.start_task("r1", "sweep", UNITS, now_s=101.0)
        jobs = [
            fresh_job(f, last) if fresh else row_job(list(range(f, last + 1)), 1, f"j{f}-{last}:1")
            for f, last in story["jobs"]
        ]
        await store.add_jobs(jobs, now_s=102.0)
        await store.see_jobs(
            {j.id: ("w1", True) for j, s in zip(jobs, story["seen"], strict=True) if s}, 103.0
        )
        gone = [j.id for j, r in zip(jobs, story["released"], strict=True) if r]
        await store.release_jobs(gone, "its worker died")
        entries = [entry(j.id, o) for j, o in zip(jobs, story["reports"], strict=True) if o]
        if story["twice"]:
            entries += entries
        await apply(store, entries)
        _, pending = await store.unit_page("r1", "sweep", "pending", 0, UNITS)
        if pending:
            attempt = max(u.attempt for u in pending) + 1
            await store.add_jobs([row_job([u.index for u in pending], attempt, "again")], 104.0)
            outcomes = {u.index: o for u in pending if (o := story["second"][u.index])}
            if outcomes:
                await apply(store, [entry("again", outcomes, attempt, "w2")], now_s=70.0)
        return await store.units("r1", "sweep"), await store.counts("r1")
    finally:
        await store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(story=stories())
def test_range_jobs_read_as_jobs_of_rows(story: dict[str, Any]) -> None:
    """Whatever happens to a task's first jobs (seen running, released, reported done,
    failed, killed, cut short, reported twice or in part) and to the units sent back,
    range jobs leave every unit as jobs of unit rows would (state, attempt, job, memory,
    worker, error, errors, kills, times), and the counts agree with the listing."""

    async def both() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            ranged, ranged_counts = await play(Path(tmp) / "a.db", story, fresh=True)
            rows, row_counts = await play(Path(tmp) / "b.db", story, fresh=False)
        assert ranged == rows
        assert ranged_counts == row_counts
        if ranged:
            assert ranged_counts == {"sweep": counts_of_listing(ranged)}

    asyncio.run(both())


async def test_jobs_that_skip_fresh_units_are_refused_with_what_they_took(store: RunStore):
    """A job of unit rows that takes fresh units other than the next ones from the
    frontier, or a fresh job whose units are not one range, is refused with a message that
    names the units, the task and where the fresh units begin; nothing is written."""
    await store.start_task("r1", "sweep", 10, now_s=101.0)
    with pytest.raises(
        ValueError,
        match=r"units 2\.\.3 of task 'sweep' are not the next fresh ones \(from 0, of 10\)",
    ):
        await store.add_jobs([row_job([2, 3], 1, "skips")], now_s=102.0)
    odd = NewJob(
        id="odd", run="r1", task="sweep", kind="chunk", queue="cpu", attempt=1,
        indices=(0, 2), memory_gb=1.0, fresh=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="fresh job odd is not one range"):
        await store.add_jobs([odd], now_s=102.0)
    assert await unit_rows(store) == 0
    assert await store.fresh_units("r1", "sweep") == range(10)
    assert await store.jobs("r1") == []


def _route(store: RunStore) -> Any:
    """The ``GET /runs/{id}/units`` route over ``store`` alone."""
    from types import SimpleNamespace

    from simrun.service.routes.runs import units

    controller = SimpleNamespace(queries=SimpleNamespace(store=store))
    return lambda **query: units("r1", controller, task="sweep", **query)


@pytest.mark.parametrize(
    ("count", "offset", "limit", "indices"),
    [
        (10, 0, 3, [0, 1, 2]),
        (10, 8, 5, [8, 9]),
        (10, 20, 5, []),
        (10, -4, 2, [0, 1]),
        (2000, 0, 10_000, list(range(500))),
    ],
)
async def test_a_page_of_units(
    store: RunStore, count: int, offset: int, limit: int, indices: list[int]
) -> None:
    """A page holds the units from its offset (never below 0), at most 500 (`MAX_PAGE`),
    with the total of the state."""
    await store.start_task("r1", "sweep", count, now_s=101.0)
    page = await _route(store)(state="pending", offset=offset, limit=limit)
    assert [u["index"] for u in page["units"]] == indices
    assert (page["total"], page["offset"]) == (count, max(0, offset))


@pytest.mark.parametrize(
    ("units", "sent_back", "offset", "limit", "indices"),
    [
        (1_000_000, [2, 5], 0, 4, [2, 5, 10, 11]),
        (1_000_000, [2, 5], 1, 2, [5, 10]),
        (1_000_000, [2, 5], 4, 2, [12, 13]),
        (1_000_000, [], 999_998, 5, [999_998, 999_999]),
        (10, [7], 0, 5, [7]),
    ],
)
async def test_a_page_of_pending_units_is_made_from_the_frontier(
    store: RunStore, units: int, sent_back: list[int], offset: int, limit: int, indices: list[int]
) -> None:
    """Pending units: those sent back (rows below the frontier) and the fresh ones from
    the frontier, by index, made up for the page only (a million of them cost a page)."""
    await store.start_task("r1", "sweep", units, now_s=101.0)
    if sent_back:
        await store.add_jobs([fresh_job(0, 9)], now_s=102.0)
        outcomes = {i: "failed" if i in sent_back else "done" for i in range(10)}
        await apply(store, [entry("j0-9:1", outcomes)])
    total, page = await store.unit_page("r1", "sweep", "pending", offset, limit)
    assert [u.index for u in page] == indices
    assert total == len(sent_back) + units - (10 if sent_back else 0)


@pytest.mark.parametrize(
    ("rows", "spans", "offset", "limit", "indices", "total"),
    [
        ([], [(0, 9)], 0, 3, [0, 1, 2], 10),
        ([], [(0, 9), (10, 999_999)], 999_997, 5, [999_997, 999_998, 999_999], 1_000_000),
        ([5], [(0, 4), (6, 9)], 3, 4, [3, 4, 5, 6], 10),
        ([0, 1], [], 1, 10, [1], 2),
        ([], [], 0, 10, [], 0),
        ([3], [(10, 19)], 0, 3, [3, 10, 11], 11),
    ],
)
async def test_a_page_of_done_units_is_made_from_their_spans(
    store: RunStore,
    rows: list[int],
    spans: list[tuple[int, int]],
    offset: int,
    limit: int,
    indices: list[int],
    total: int,
) -> None:
    """Done units: those with a row and the spans, by index, each as its row or span
    says; only the part of a span the page reaches becomes units."""
    await store.start_task("r1", "sweep", 1_000_000, now_s=101.0)
    reused = [range(a, b + 1) for a, b in spans]
    async with store.transaction() as conn:
        await store._reuse_units(conn, "r1", "sweep", 1_000_000, reused, "r0", 101.0)
    if rows:
        await store.connection.executemany(
            "INSERT OR REPLACE INTO units (run_id, task, idx, kind, state, attempt, worker)"
            " VALUES ('r1', 'sweep', ?, 'chunk', 'done', 2, 'w9')",
            [(i,) for i in rows],
        )
    count, page = await store.unit_page("r1", "sweep", "done", offset, limit)
    assert ([u.index for u in page], count) == (indices, total)
    for u in page:
        assert (u.state, u.worker) == (("done", "w9") if u.index in rows else ("done", None))
        assert u.job_id == (None if u.index in rows else "reused:r0")


@pytest.mark.parametrize("state", ["done", "queued", "pending"])
async def test_a_page_of_a_million_units_costs_a_page(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """A page of a task's units (``GET /runs/{id}/units``) whose units are a span of
    1,000,000 reused units, a range job in flight or the frontier makes the units of the
    page only, never those of the whole range."""
    if state == "done":
        reused = [range(1_000_000)]
        await store.start_task("r1", "sweep", 1_000_000, 101.0, reused=reused, reused_from="r0")
    else:
        await store.start_task("r1", "sweep", 1_000_000, now_s=101.0)
        if state == "queued":
            await store.add_jobs([fresh_job(0, 999_999)], now_s=102.0)
    built = 0
    made = UnitRow.__init__

    def counting(self: UnitRow, *args: Any, **kwargs: Any) -> None:
        nonlocal built
        built += 1
        made(self, *args, **kwargs)

    monkeypatch.setattr(UnitRow, "__init__", counting)
    page = await _route(store)(state=state, offset=999_990, limit=50)
    assert page["total"] == 1_000_000
    assert [u["index"] for u in page["units"]] == list(range(999_990, 1_000_000))
    assert {u["state"] for u in page["units"]} == {state}
    assert built <= 50
