"""ResourceStore on real SQLite files: the rules through record/resolve, the batch path on a
caller's transaction, and safety under asyncio tasks, threads and a second process."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simrun import db
from simrun.core.reports import WorkerReport
from simrun.plugins import ResourceHint
from simrun.resources import MARGIN, RETRY_FACTOR, WINDOW, ResourceKey, ResourceStore
from simrun.resources.policy import MIN_MEMORY_PER_WORKER_GB, Observation, decide
from simrun.resources.store import COMPONENT, MIGRATIONS, Record
from simrun.workflow import ResourceOverride
from tests.support.examples import examples

KEY = ResourceKey("heat", "plate", "64")
OTHER = ResourceKey("heat", "plate", "128")
HINT = ResourceHint(memory_base_gb=1.0, memory_per_worker_gb=4.0, scratch_gb=5.0, gpus=0)


def success(*peaks_gb: float, seconds: float = 2.0, limit_gb: float = 8.0) -> WorkerReport:
    return WorkerReport(
        peak_memory_gb=tuple(peaks_gb),
        seconds_per_unit=seconds,
        units=len(peaks_gb),
        limit_gb=limit_gb,
    )


def killed(limit_gb: float) -> WorkerReport:
    return WorkerReport(
        peak_memory_gb=(limit_gb * 1.01,),
        seconds_per_unit=None,
        units=1,
        limit_gb=limit_gb,
        killed_for_memory=True,
    )


@pytest.fixture
async def store(tmp_path: Path) -> ResourceStore:
    async with ResourceStore(tmp_path / "store" / "simrun.db") as s:
        yield s  # type: ignore[misc]  # an async generator fixture


async def test_database_is_created_when_needed(tmp_path: Path) -> None:
    """The first call creates the directory and the file, in WAL mode, with its version."""
    path = tmp_path / "new" / "dir" / "simrun.db"
    store = ResourceStore(path)
    assert not path.exists()  # nothing happens before the first call
    try:
        got = await store.resolve(KEY, HINT, None)
    finally:
        store.close()
    assert got.source == "plugin hint"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        version = conn.execute(
            "SELECT version FROM schema_versions WHERE component = ?", (COMPONENT,)
        ).fetchone()[0]
    assert version == len(MIGRATIONS)


async def test_kill_kill_success_and_more_successes(store: ResourceStore) -> None:
    """The rules as a sequence of reports: hint; kill -> RETRY_FACTOR x limit; second kill
    -> RETRY_FACTOR x its limit; then successes: what the pure decide gives on the same
    observations (kills at the hint lift its cap)."""
    got = await store.resolve(KEY, HINT, None)
    assert (got.memory_per_worker_gb, got.source, got.samples) == (4.0, "plugin hint", 0)

    await store.record(KEY, killed(4.0), 1.0, oom=True, run="r1")
    got = await store.resolve(KEY, HINT, None)
    assert got.memory_per_worker_gb == pytest.approx(RETRY_FACTOR * 4.0)
    assert (got.source, got.samples, got.seconds_per_unit) == ("learned from 1 run", 1, None)

    await store.record(KEY, killed(RETRY_FACTOR * 4.0), 1.0, oom=True, run="r1")
    got = await store.resolve(KEY, HINT, None)
    assert got.memory_per_worker_gb == pytest.approx(RETRY_FACTOR**2 * 4.0)
    assert got.samples == 2

    kills = [Observation(4.0, True, None, "r1"), Observation(8.0, True, None, "r1")]
    await store.record(KEY, success(9.5, seconds=3.0), 1.0, run="r2")
    got = await store.resolve(KEY, HINT, None)
    after = [*kills, Observation(9.5, False, 3.0, "r2")]
    assert got == decide(after, HINT, None)
    # a kill at the hint lifted its cap: the bound is RETRY_FACTOR x the largest kill
    assert got.memory_per_worker_gb == pytest.approx(RETRY_FACTOR * 8.0)
    assert (got.source, got.samples, got.seconds_per_unit) == ("learned from 1 run", 1, 3.0)

    await store.record(KEY, success(7.0, 8.0, seconds=1.0), 1.0, run="r3")
    got = await store.resolve(KEY, HINT, None)
    more = [*after, Observation(7.0, False, 1.0, "r3"), Observation(8.0, False, 1.0, "r3")]
    assert got == decide(more, HINT, None)
    assert got.memory_per_worker_gb >= 9.5 * MARGIN  # < 20 samples: covers the largest
    assert (got.source, got.samples, got.seconds_per_unit) == ("learned from 2 runs", 3, 1.0)
    assert (got.memory_base_gb, got.scratch_gb, got.gpus) == (1.0, 5.0, 0)

    other = await store.resolve(OTHER, HINT, None)  # another variant learned nothing
    assert (other.memory_per_worker_gb, other.source) == (4.0, "plugin hint")


async def test_override_present_and_absent(store: ResourceStore) -> None:
    """An override wins field by field over what was learned, and only where it is set."""
    await store.record(KEY, success(2.0), 1.0, run="r1")
    learned = await store.resolve(KEY, HINT, None)
    fixed = await store.resolve(KEY, HINT, ResourceOverride(memory_per_worker_gb=12.0, gpus=2))
    assert learned == decide([Observation(2.0, False, 2.0, "r1")], HINT, None)
    assert (fixed.memory_per_worker_gb, fixed.gpus, fixed.source) == (12.0, 2, "override")
    assert (fixed.memory_base_gb, fixed.scratch_gb) == (1.0, 5.0)
    assert fixed.seconds_per_unit == learned.seconds_per_unit == 2.0


async def test_a_kill_records_the_limit_not_the_peaks(store: ResourceStore) -> None:
    """A kill is one observation at the report's limit, whatever peaks it carries."""
    await store.record(
        KEY,
        WorkerReport(peak_memory_gb=(1.0, 50.0), seconds_per_unit=4.0, units=3, limit_gb=6.0),
        1.0,
        oom=True,
        run="r",
    )
    assert await store.history(KEY) == [Observation(6.0, True, None, "r")]


async def test_one_observation_per_worker_process(store: ResourceStore) -> None:
    """A report of several processes gives one observation each, with the report's
    seconds."""
    written = await store.record_many([Record(KEY, success(1.0, 2.0, 3.0, seconds=5.0), 1.0)])
    assert written == 3
    assert await store.history(KEY) == [Observation(gb, False, 5.0, "") for gb in (1, 2, 3)]


async def test_window_holds_the_last_successes_and_pending_kills(store: ResourceStore) -> None:
    """history() reads the last WINDOW successes and the last WINDOW kills, oldest first;
    the kill after the last success is pending (its floor holds)."""
    await store.record(KEY, killed(1.0), 0.0, oom=True)  # answered by the successes below
    peaks = [float(i + 1) for i in range(WINDOW + 5)]
    await store.record_many([Record(KEY, success(p), 0.0) for p in peaks])
    await store.record(KEY, killed(500.0), 0.0, oom=True)
    history = await store.history(KEY)
    assert [o.memory_gb for o in history if not o.oom] == peaks[-WINDOW:]
    assert [o.memory_gb for o in history if o.oom] == [1.0, 500.0]
    got = await store.resolve(KEY, HINT, None)
    assert got.memory_per_worker_gb == pytest.approx(RETRY_FACTOR * 500.0)


@pytest.mark.parametrize(
    ("report", "oom", "base_gb", "message"),
    [
        (success(limit_gb=4.0), False, 1.0, "peak_memory_gb is empty"),
        (success(1.0, limit_gb=0.0), True, 1.0, "needs the limit"),
        (success(1.0), False, -1.0, "base_gb"),
        (success(1.0), False, float("nan"), "base_gb"),
        (success(1.0), False, True, "base_gb"),
    ],
)
async def test_bad_reports_are_refused_and_nothing_is_written(
    store: ResourceStore, report: WorkerReport, oom: bool, base_gb: float, message: str
) -> None:
    """A bad record is refused with an error naming the key, the run and the field; the
    good records of the same batch are not written either."""
    good = Record(KEY, success(1.0), 1.0, run="ok")
    with pytest.raises(ValueError, match=message) as info:
        await store.record_many([good, Record(KEY, report, base_gb, oom, run="bad-run")])
    assert "heat/plate/64" in str(info.value)
    assert "bad-run" in str(info.value)
    assert await store.history(KEY) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"peak_memory_gb": (1.0, float("nan"))}, r"got nan at peak_memory_gb\[1\]"),
        ({"peak_memory_gb": (-1.0,)}, r"peak_memory_gb.*at peak_memory_gb\[0\]"),
        ({"seconds_per_unit": -2.0}, "seconds_per_unit"),
        ({"limit_gb": float("inf")}, "limit_gb"),
        ({"units": -1}, "units"),
    ],
)
def test_a_report_with_a_bad_number_cannot_exist(change: dict[str, object], message: str) -> None:
    """A report's numbers are finite and >= 0 (its units an integer >= 0): a report that
    breaks this cannot be built, so none reaches the store (nor the report stream)."""
    fields: dict[str, object] = {
        "peak_memory_gb": (1.0,),
        "seconds_per_unit": 1.0,
        "units": 1,
        "limit_gb": 4.0,
        **change,
    }
    with pytest.raises(ValueError, match=message):
        WorkerReport.from_dict(fields)
    with pytest.raises(ValueError, match=next(iter(change))):
        WorkerReport(**fields)  # type: ignore[arg-type]


async def test_batch_on_the_callers_transaction(store: ResourceStore) -> None:
    """record_many(conn=...) writes inside the caller's transaction: a rollback drops the
    observations with the caller's own rows; a commit keeps both."""
    async with db.session(store.db) as conn:
        await store.ensure_schema(conn)
        await conn.execute("CREATE TABLE IF NOT EXISTS unit_states (unit INTEGER, state TEXT)")

        async def ingest(state: str, fail: bool) -> None:
            async with db.transaction(conn):
                await conn.execute("INSERT INTO unit_states VALUES (1, ?)", (state,))
                written = await store.record_many(
                    [Record(KEY, success(3.0), 1.0, run=state)], conn=conn
                )
                assert written == 1
                assert conn.in_transaction  # the store did not commit
                if fail:
                    raise RuntimeError("the caller fails after the store wrote")

        with pytest.raises(RuntimeError, match="caller fails"):
            await ingest("lost", fail=True)
        await ingest("kept", fail=False)
        states = await conn.execute_fetchall("SELECT state FROM unit_states")
    assert [r[0] for r in states] == ["kept"]
    assert await store.history(KEY) == [Observation(3.0, False, 2.0, "kept")]


async def test_batch_on_a_connection_outside_a_transaction_is_refused(tmp_path: Path) -> None:
    """Passing a connection that is not in a transaction is an error, not an autocommit."""
    store = ResourceStore(tmp_path / "simrun.db", keep_open=False)
    async with db.session(store.db) as conn:
        await store.ensure_schema(conn)
        with pytest.raises(RuntimeError, match="not in a transaction"):
            await store.record_many([Record(KEY, success(1.0), 1.0)], conn=conn)


async def test_batch_on_a_connection_before_the_schema_is_refused(tmp_path: Path) -> None:
    """On a caller's transaction the store cannot create its tables: it says what to do."""
    store = ResourceStore(tmp_path / "simrun.db", keep_open=False)
    async with db.session(store.db) as conn, db.transaction(conn):
        with pytest.raises(RuntimeError, match=r"call ensure_schema\(conn\)"):
            await store.record_many([Record(KEY, success(1.0), 1.0)], conn=conn)


async def test_summaries(store: ResourceStore) -> None:
    """summaries() lists each key with its samples, percentile, request, source and the
    time and limit of its last kill."""
    before = time.time()
    await store.record_many(
        [Record(KEY, success(2.0, seconds=4.0), 1.0, run="a"), Record(OTHER, success(1.0), 1.0)]
    )
    await store.record(OTHER, killed(3.0), 1.0, oom=True, run="b")
    by_key = {s.key: s for s in await store.summaries({"heat": HINT})}
    assert sorted(by_key) == [OTHER, KEY]
    heat64, heat128 = by_key[KEY], by_key[OTHER]
    assert (heat64.observations, heat64.samples, heat64.typical_gb) == (1, 1, 2.0)
    assert heat64.requested_gb == pytest.approx(HINT.memory_per_worker_gb)  # capped
    assert (heat64.seconds_per_unit, heat64.source) == (4.0, "learned from 1 run")
    assert heat64.last_kill_s is None
    assert heat128.requested_gb == pytest.approx(RETRY_FACTOR * 3.0)
    assert heat128.source == "learned from 2 runs"
    assert heat128.last_kill_gb == 3.0
    assert heat128.last_kill_s is not None
    assert before - 1 <= heat128.last_kill_s <= time.time() + 1
    assert await store.keys() == [OTHER, KEY]


async def test_concurrent_asyncio_tasks_on_a_new_file(tmp_path: Path) -> None:
    """Many tasks recording and resolving at once on a file that does not exist yet all
    succeed, and every observation is stored."""
    store = ResourceStore(tmp_path / "simrun.db")
    try:

        async def worker(i: int) -> None:
            for j in range(5):
                await store.record(KEY, success(float(i * 5 + j)), 1.0, run=f"r{i}")
                await store.resolve(KEY, HINT, None)

        await asyncio.gather(*(worker(i) for i in range(20)))
        history = await store.history(KEY, window=1000)
    finally:
        store.close()
    assert sorted(o.memory_gb for o in history) == [float(i) for i in range(100)]


def test_several_threads_each_with_its_own_event_loop(tmp_path: Path) -> None:
    """One store used from threads, each running its own event loop, loses nothing."""
    store = ResourceStore(tmp_path / "simrun.db")
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    async def run(t: int) -> None:
        for j in range(10):
            batch = [Record(KEY, success(float(t * 100 + j * 3 + k)), 1.0) for k in range(3)]
            await store.record_many(batch)
            await store.resolve(KEY, HINT, None)

    def thread(t: int) -> None:
        try:
            barrier.wait()
            asyncio.run(run(t))
        except BaseException as exc:  # noqa: BLE001  # kept, and asserted empty below
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        history = asyncio.run(store.history(KEY, window=1000))
    finally:
        store.close()
    assert errors == []
    assert len(history) == 4 * 10 * 3
    assert len({o.memory_gb for o in history}) == 120


READER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from simrun.plugins import ResourceHint
    from simrun.resources import ResourceKey, ResourceStore

    async def main():
        store = ResourceStore(Path(sys.argv[1]))
        key = ResourceKey.from_text(sys.argv[2])
        seen = []
        deadline = time.monotonic() + float(sys.argv[3])
        print("ready", flush=True)
        while time.monotonic() < deadline:
            history = await store.history(key, window=100000)
            resolved = await store.resolve(key, ResourceHint(), None)
            seen.append([len(history), resolved.samples])
            if len(history) >= int(sys.argv[4]):
                break
        store.close()
        print(json.dumps(seen), flush=True)

    asyncio.run(main())
    """
)


async def test_a_second_process_reads_while_we_write(store: ResourceStore) -> None:
    """A second process reading while batches are written sees only whole batches (each
    transaction entirely or not at all), a count that never goes back, and no error."""
    await store.resolve(KEY, HINT, None)  # create the file before the reader starts
    batch, batches = 7, 60
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        READER,
        str(store.db),
        KEY.text(),
        "60",
        str(batch * batches),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    for b in range(batches):
        await store.record_many(
            [Record(KEY, success(float(b)), 1.0, run=f"r{b}") for _ in range(batch)]
        )
    out_bytes, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    out = out_bytes.decode()
    seen = json.loads(out.strip().splitlines()[-1])
    counts = [count for count, _ in seen]
    assert any(0 < c < batch * batches for c in counts), "the reader never overlapped"
    assert all(c % batch == 0 for c in counts), counts
    assert counts == sorted(counts)
    assert counts[-1] == batch * batches
    # resolve reads in its own transaction too: whole batches, or the full window
    assert all(samples % batch == 0 or samples == WINDOW for _, samples in seen)


ops = st.lists(
    st.tuples(st.booleans(), st.floats(0.1, 200.0, allow_nan=False), st.sampled_from("abc")),
    min_size=1,
    max_size=25,
)


@given(ops)
@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_store_agrees_with_the_pure_decision(
    tmp_path: Path, items: list[tuple[bool, float, str]]
) -> None:
    """Whatever sequence of successes and kills is recorded, the store resolves exactly
    what the pure decide says of the same history."""

    async def run() -> None:
        path = tmp_path / f"{time.monotonic_ns()}.db"
        async with ResourceStore(path) as store:
            history: list[Observation] = []
            for oom, gb, run_id in items:
                if oom:
                    await store.record(KEY, killed(gb), 1.0, oom=True, run=run_id)
                    history.append(Observation(gb, True, None, run_id))
                else:
                    await store.record(KEY, success(gb, seconds=gb / 10), 1.0, run=run_id)
                    history.append(Observation(gb, False, gb / 10, run_id))
                got = await store.resolve(KEY, HINT, None)
                assert got == decide(history, HINT, None)

    asyncio.run(run())


async def test_summaries_request_what_resolve_requests(store: ResourceStore) -> None:
    """The request a summary shows is what resolve gives without an override, the floor on
    small learned requests included."""
    small = ResourceKey("heat", "plate", "8")
    await store.record(small, success(0.02), 0.5, run="a")
    summary = next(s for s in await store.summaries({"heat": HINT}) if s.key == small)
    resolved = await store.resolve(small, HINT, None)
    assert summary.requested_gb == resolved.memory_per_worker_gb == MIN_MEMORY_PER_WORKER_GB
    assert summary.source == resolved.source


async def test_input_sizes_are_kept_and_fitted(store: ResourceStore) -> None:
    """An observation keeps the size of its task's inputs; resolve with a size fits memory
    to it (a larger input asks for more), the very answer of the pure decide."""
    for i in range(1, 21):
        await store.record(KEY, success(0.5 * i), 0.0, run="r", input_bytes=i * 10**9)
    history = await store.history(KEY)
    assert [o.input_bytes for o in history] == [i * 10**9 for i in range(1, 21)]
    small = await store.resolve(KEY, ResourceHint(), None, 2 * 10**9)
    large = await store.resolve(KEY, ResourceHint(), None, 20 * 10**9)
    assert large == decide(history, ResourceHint(), None, input_bytes=20 * 10**9)
    assert large.memory_per_worker_gb > 5 * small.memory_per_worker_gb


async def test_a_negative_input_size_is_refused(store: ResourceStore) -> None:
    """A record whose input size is negative is refused, naming the key and the field."""
    with pytest.raises(ValueError, match="input_bytes must be an integer >= 0"):
        await store.record(KEY, success(1.0), 0.0, input_bytes=-1)
