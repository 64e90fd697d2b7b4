"""Worker processes of a real pool: which one a job gets after another task, the memory
limit they are killed at, and units sent to them in batches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from simrun.core.jobs import JobSpec
from simrun.core.wire import UnitKey
from simrun.worker.ledger import Ledger
from simrun.worker.pool.processes import (
    KILL_HEADROOM_GB,
    RECYCLE_KEPT_GB,
    ProcessPool,
    WorkerProcess,
)
from simrun.worker.pool.protocol import task_message
from simrun.worker.pool.runner import JobMemory, run_chunk
from tests.support import REPO
from tests.support.harness import PLUGINS, make_spec, run_burst, run_id
from tests.support.mem_tasks import REFS as MEM_REFS

pytestmark = pytest.mark.e2e

#: The request learned for a no-op task: its peak of 18.9 MB times the margin 1.4.
LIGHT_GB = 26.5 / 1024


@asynccontextmanager
async def one_process_pool() -> AsyncIterator[ProcessPool]:
    pool = ProcessPool(1, plugins=PLUGINS, python_path=(str(REPO),))
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close()


async def never_stale(_unit: UnitKey) -> bool:
    return False


async def run_on(
    pool: ProcessPool, spec: JobSpec, limit_gb: float
) -> tuple[WorkerProcess, JobMemory, Ledger]:
    """Check a process out for ``spec``, run the chunk, check it back in."""
    worker = await pool.checkout((spec.run, spec.task), ())
    ledger = Ledger(spec.units)
    try:
        result = await run_chunk(
            worker, spec, ledger, limit_gb=limit_gb, is_stale=never_stale, stopping=lambda: False
        )
    finally:
        await pool.checkin(worker)
    return worker, result, ledger


async def test_a_process_is_kept_across_light_tasks_and_restarted_after_a_leak(
    tmp_path: Path,
) -> None:
    """A process switching task is started afresh only when what it keeps beyond its
    baseline (its memory before any task ran) passes RECYCLE_KEPT_GB, whatever the limit:
    an idle interpreter is kept for a light task, a process that leaked is restarted."""
    async with one_process_pool() as pool:
        first, result, ledger = await run_on(
            pool, make_spec(tmp_path, "a", "test-noop", range(5)), LIGHT_GB
        )
        assert set(ledger.outcomes.values()) == {"done"}
        assert not result.killed_for_memory
        assert 0 < first.baseline_gb <= first.anon_gb() <= first.baseline_gb + RECYCLE_KEPT_GB
        second, _, ledger = await run_on(
            pool, make_spec(tmp_path, "b", "test-noop", range(5)), LIGHT_GB
        )
        assert set(ledger.outcomes.values()) == {"done"}
        assert second.pid == first.pid
        assert pool.replaced == 0

        leak = make_spec(tmp_path, "leak", "test-hog", [0], {"keep_mb": 10})
        leaky, _, ledger = await run_on(pool, leak, 4.0)
        assert ledger.outcomes == {0: "done"}
        assert leaky.pid == first.pid
        after, _, _ = await run_on(pool, make_spec(tmp_path, "c", "test-noop", [0]), 4.0)
        assert after.pid != first.pid
        assert pool.replaced == 1


#: What the setup of the heavy task of the two-keys test holds (MiB), for its process's life.
SETUP_MB = 50


async def test_two_keys_sharing_a_process_each_measure_what_they_use(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A job's peak is what its own task uses, not what an earlier task left in the process:
    with one worker process serving, in turn, a task whose setup holds SETUP_MB MiB and a
    task that allocates nothing, the light task measures what it measures alone (not the
    heavy setup on top), and the heavy task measures its setup every time, also when it
    comes back after the light one."""
    light_alone = make_spec(tmp_path, "alone", "test-noop", range(4), run=run_id("r0"))
    _, alone = await run_burst(redis_url, redis_prefix, [light_alone], processes=1, prefetch=0)
    own_gb = max(alone[light_alone.job_id].report.peak_memory_gb)

    heavy = {"setup_mb": SETUP_MB}
    jobs = [
        make_spec(tmp_path, "model", "test-hog", [0, 1], heavy),
        make_spec(tmp_path, "light", "test-noop", [0, 1]),
        make_spec(tmp_path, "model", "test-hog", [2, 3], heavy),
        make_spec(tmp_path, "light", "test-noop", [2, 3]),
    ]
    _, reports = await run_burst(redis_url, redis_prefix, jobs, processes=1, prefetch=0)
    peaks = {spec.job_id: max(reports[spec.job_id].report.peak_memory_gb) for spec in jobs}
    for spec in jobs:
        assert set(reports[spec.job_id].outcomes.values()) == {"done"}
    light = [peaks[spec.job_id] for spec in jobs if spec.task == "light"]
    model = [peaks[spec.job_id] for spec in jobs if spec.task == "model"]
    mib = 1 / 1024
    # Alone, the light task holds the interpreter and little else.
    assert own_gb < 40 * mib, own_gb
    for peak_gb in light:  # not the heavy task's setup on top of its own
        assert peak_gb < own_gb + 10 * mib, (light, own_gb)
    for peak_gb in model:  # its setup, every time
        assert peak_gb > own_gb + (SETUP_MB - 5) * mib, (model, own_gb)


async def test_a_limit_below_the_interpreter_is_raised_to_baseline_plus_headroom(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A job whose limit is below what an idle worker process holds runs under the process's
    baseline plus KILL_HEADROOM_GB instead of being killed at once, and reports that limit;
    a unit going past the raised limit is still killed for memory, with a message saying
    why the limit was raised."""
    light = make_spec(tmp_path, "tiny", "test-noop", [0, 1, 2], memory_gb=0.005)
    hog = make_spec(tmp_path, "hog", "test-hog", [0, 1], {"hog_mb": 200}, memory_gb=0.005)
    _, reports = await run_burst(redis_url, redis_prefix, [light, hog], processes=1, prefetch=0)

    done = reports[light.job_id]
    assert done.outcomes == {0: "done", 1: "done", 2: "done"}, done.errors
    assert done.report.killed_for_memory is False
    assert KILL_HEADROOM_GB < done.report.limit_gb < KILL_HEADROOM_GB + 0.1
    killed = reports[hog.job_id]
    assert killed.outcomes == {0: "killed", 1: "not_run"}
    assert killed.report.killed_for_memory is True
    assert KILL_HEADROOM_GB < killed.report.limit_gb < 0.2
    assert "below what the process holds by itself" in killed.errors[0]


async def test_a_units_request_is_answered_in_batches_and_the_slot_tells_the_unit(
    tmp_path: Path,
) -> None:
    """One "units" request is answered without a message per unit: the outcomes come in
    order, a failing unit's (with its traceback) at once in a message of its own, the rest
    in the last message ("end"); the next units still run. The process's slot says every
    unit of the batch ended. A request without a list of indices gets one failed reply and
    the process goes on."""
    spec = make_spec(tmp_path, "f", "test-flaky", [0, 1, 2, 3], {"fail_indices": [1]})
    async with one_process_pool() as pool:
        worker = await pool.checkout((spec.run, spec.task), ())
        assert (await worker.call(task_message(spec, setup=True)))["ok"] is True
        worker.batch = (7, spec.job_id, [0, 1, 2, 3])
        await worker.send({"op": "units", "indices": [0, 1, 2, 3], "batch": 7})
        first = await worker.receive(10.0)
        assert [u[:2] for u in first["units"]] == [[0, True], [1, False]]
        assert first["end"] is False
        assert "ValueError: unit 1 fails on purpose" in first["units"][1][3]
        last = await worker.receive(10.0)
        assert [u[:2] for u in last["units"]] == [[2, True], [3, True]]
        assert last["end"] is True
        position = worker.slot_position()
        assert position is not None
        assert position[0] == 4
        bad = await worker.call({"op": "units", "indices": "0-2"}, 10.0)
        assert (bad["ok"], bad["index"], bad["end"]) == (False, None, True)
        assert "unknown request" in bad["error"]
        again = await worker.call({"op": "units", "indices": [2], "batch": 8}, 10.0)
        assert again["units"][0][:2] == [2, True]
        worker.batch = None
        await pool.checkin(worker)


async def test_units_marked_stale_during_a_chunk_are_skipped_between_batches(
    tmp_path: Path,
) -> None:
    """Units go to the process in batches, each unit checked for staleness once, in order,
    before its batch is sent, which is one batch ahead once units are short: units from 150
    on marked stale once unit 50 is done (a batch holds at most twice the units of the one
    before it, so unit 150 is sent two batches after unit 50's) are skipped, every other
    unit is computed."""
    spec = make_spec(tmp_path, "s", "test-noop", range(200))
    ledger = Ledger(spec.units)
    asked: list[UnitKey] = []

    async def is_stale(unit: UnitKey) -> bool:
        asked.append(unit)
        return isinstance(unit, int) and unit >= 150 and ledger.outcomes.get(50) == "done"

    async with one_process_pool() as pool:
        worker = await pool.checkout((spec.run, spec.task), ())
        try:
            await run_chunk(
                worker, spec, ledger, limit_gb=None, is_stale=is_stale, stopping=lambda: False
            )
        finally:
            await pool.checkin(worker)
    assert asked == list(range(200))
    assert all(ledger.outcomes[i] == "done" for i in range(150)), ledger.errors
    assert all(ledger.outcomes[i] == "stale" for i in range(150, 200))


async def test_a_death_in_a_batch_keeps_the_units_that_ended_before_it(tmp_path: Path) -> None:
    """Outcomes come back batched, so a process that dies in the middle of a batch has not
    sent those of the units that ended well before it: its slot tells them, and they are
    done (with their seconds); the unit it died under is failed, the rest not run."""
    spec = make_spec(tmp_path, "c", "test-crash", range(14), {"crash_indices": [11]})
    async with one_process_pool() as pool:
        _, _, ledger = await run_on(pool, spec, 1.0)
    assert all(ledger.outcomes[i] == "done" for i in range(11)), ledger.outcomes
    assert set(ledger.seconds) == set(range(11))
    assert ledger.outcomes[11] == "failed"
    assert "exit code 3" in ledger.errors[11]
    assert "computing unit 11" in ledger.errors[11]
    assert ledger.outcomes[12] == ledger.outcomes[13] == "not_run"


async def test_a_unit_past_its_timeout_in_a_batch_is_the_one_timed_out(tmp_path: Path) -> None:
    """The timeout counts from the start of the unit the slot says is running, not from the
    start of its batch: short units before it are done, the long one times out, the rest of
    the chunk is not run."""
    spec = make_spec(
        tmp_path, "t", "test-sleep", range(14), {"seconds": 30, "sleep_indices": [11]},
        timeout_s=1.5,
    )  # fmt: skip
    async with one_process_pool() as pool:
        _, _, ledger = await run_on(pool, spec, 1.0)
    assert all(ledger.outcomes[i] == "done" for i in range(11)), ledger.outcomes
    assert ledger.outcomes[11] == "timeout"
    assert "unit 11" in ledger.errors[11]
    assert ledger.outcomes[12] == ledger.outcomes[13] == "not_run"


async def test_each_unit_of_a_batch_has_its_own_log_cap(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The units of a batch send no message each, yet each one's output is capped on its
    own: the log asks the process's slot which unit runs, so every unit printing past the
    cap gets its own note naming it, with its head and its tail kept."""
    spec = make_spec(tmp_path, "chatty", "mem-chatty", range(4), {"mb": 1})
    pool = ProcessPool(1, plugins=MEM_REFS, python_path=(str(REPO),), unit_log_cap=64 * 1024)
    await pool.start()
    try:
        _, _, ledger = await run_on(pool, spec, 1.0)
    finally:
        await pool.close()
    assert set(ledger.outcomes.values()) == {"done"}, ledger.errors
    err = capfd.readouterr().err
    for i in range(4):
        assert f"HEAD out {i}\n" in err
        assert f"TAIL err {i}\n" in err
        assert f"unit {i} of job {spec.job_id}: dropped" in err
    assert len(err) < 4 * 64 * 1024 + 64 * 1024
