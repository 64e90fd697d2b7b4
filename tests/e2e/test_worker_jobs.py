"""The worker container running real jobs: a real Redis, real worker processes, and the
report each job leaves on the stream."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from simrun.examples import heat
from simrun.examples.plate import build_grid, load_plate
from simrun.queues.client import JobQueue, set_current_attempts
from simrun.queues.keys import Keys
from tests.support import REPO
from tests.support.harness import RUN, all_reports, make_container, make_spec, run_burst
from tests.support.keys import TEST_KEY
from tests.support.units import unit_records
from tests.support.wait import still_running, until

pytestmark = pytest.mark.e2e


async def test_heat_chunk_computes_the_right_files(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A chunk of heat units writes, for each index, exactly the record the heat solver
    gives for that point, and its report says every unit is done and measured."""
    settings = {"grid": 16, "diffusivities": [0.5, 1.0], "boundary_temperatures": [0.0, 50.0]}
    plate = tmp_path / "runs" / RUN / "sources" / "plate.json"  # a worker reads its store only
    plate.parent.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "plate.json", plate)
    spec = make_spec(
        tmp_path, "sweep", "heat", [0, 1, 2, 3], settings, inputs={"plate": plate}, memory_gb=1.0
    )
    _, reports = await run_burst(redis_url, redis_prefix, [spec])

    entry = reports[spec.job_id]
    assert entry.outcomes == {0: "done", 1: "done", 2: "done", 3: "done"}, entry.errors
    assert entry.report.units == 4
    assert entry.report.seconds_per_unit is not None
    assert entry.report.seconds_per_unit > 0
    assert 0 < entry.report.peak_memory_gb[0] < 1.0
    parsed = heat.HeatSettings.model_validate(settings)
    grid = build_grid(load_plate(plate), parsed.grid)
    for index in range(4):
        written = json.loads((spec.paths.task_paths().out / heat.point_name(index)).read_text())
        expected, _ = heat.simulate(grid, parsed, index)
        assert written == pytest.approx(expected)


async def test_raising_unit_reports_its_traceback_and_others_complete(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """An exception in compute_unit fails that unit alone, with its traceback in the report;
    the other units of the chunk still run."""
    spec = make_spec(tmp_path, "flaky", "test-flaky", [0, 1, 2], {"fail_indices": [1]})
    _, reports = await run_burst(redis_url, redis_prefix, [spec])

    entry = reports[spec.job_id]
    assert entry.outcomes == {0: "done", 1: "failed", 2: "done"}
    assert "Traceback" in entry.errors[1]
    assert "ValueError: unit 1 fails on purpose" in entry.errors[1]
    assert set(unit_records(spec.paths.task_paths().out)) == {0, 2}
    assert entry.report.units == 2


async def test_memory_hog_is_killed_and_the_container_keeps_serving(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A unit that allocates past memory_per_worker_gb is killed and reported killed for
    memory (the rest of its chunk handed back); the process is replaced and the next job of
    the same container succeeds."""
    hog = make_spec(
        tmp_path, "hog", "test-hog", [0, 1], {"hog_mb": 400, "seconds": 2.0}, memory_gb=0.15
    )
    after = make_spec(tmp_path, "after", "test-sleep", [0, 1], {"seconds": 0.05})
    container, reports = await run_burst(
        redis_url, redis_prefix, [hog, after], processes=1, prefetch=0
    )

    killed = reports[hog.job_id]
    assert killed.outcomes == {0: "killed", 1: "not_run"}
    assert killed.report.killed_for_memory is True
    assert killed.report.limit_gb == 0.15
    assert killed.report.peak_memory_gb[0] > 0.15
    assert "killed for memory" in killed.errors[0]
    assert reports[after.job_id].outcomes == {0: "done", 1: "done"}
    assert container.pool.replaced >= 1


async def test_timeout_and_crash_are_reported_and_replaced(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A unit past its timeout is killed and reported "timeout"; a process that ends itself
    (os._exit, SIGSEGV) fails its unit with the exit status; the rest of those chunks are
    handed back and other jobs still run."""
    slow = make_spec(tmp_path, "slow", "test-sleep", [0, 1], {"seconds": 5.0}, timeout_s=0.5)
    exits = make_spec(tmp_path, "exits", "test-crash", [0, 1, 2], {"crash_indices": [1]})
    segv = make_spec(
        tmp_path, "segv", "test-crash", [0], {"crash_indices": [0], "crash_how": "segv"}
    )
    fine = make_spec(tmp_path, "fine", "test-sleep", [0], {})
    _, reports = await run_burst(redis_url, redis_prefix, [slow, exits, segv, fine])

    assert reports[slow.job_id].outcomes == {0: "timeout", 1: "not_run"}
    assert "timeout" in reports[slow.job_id].errors[0]
    assert reports[exits.job_id].outcomes == {0: "done", 1: "failed", 2: "not_run"}
    assert "exit code 3" in reports[exits.job_id].errors[1]
    assert reports[segv.job_id].outcomes == {0: "failed"}
    assert "SIGSEGV" in reports[segv.job_id].errors[0]
    assert reports[fine.job_id].outcomes == {0: "done"}


async def test_setup_runs_once_per_task_per_process(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Three chunks of one task in a one-process container run setup once; a failing setup
    fails every unit of its chunk with the setup's traceback."""
    chunks = [
        make_spec(tmp_path, "once", "test-sleep", [i, i + 10], {"units": 30}) for i in range(3)
    ]
    broken = make_spec(tmp_path, "broken", "test-sleep", [0, 1], {"setup_fails": True})
    _, reports = await run_burst(
        redis_url, redis_prefix, [*chunks, broken], processes=1, prefetch=0
    )

    assert all(set(reports[c.job_id].outcomes.values()) == {"done"} for c in chunks)
    setups = list(chunks[0].paths.task_paths().out.glob("setup-*.txt"))
    assert len(setups) == 1
    assert setups[0].read_text() == "setup\n"
    failed = reports[broken.job_id]
    assert failed.outcomes == {0: "failed", 1: "failed"}
    assert "setup fails on purpose" in failed.errors[0]


async def test_merge_and_refusal(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    """A merge job runs the type's merge under the base memory; a merge that needs more than
    its base memory is killed for memory; a chunk larger than the whole container is refused
    at once with a message naming what it needs and what the worker has."""
    chunk = make_spec(tmp_path, "m", "test-sleep", [0, 1], {})
    merge = make_spec(tmp_path, "m", "test-sleep", kind="merge", base_gb=0.5)
    heavy = make_spec(
        tmp_path, "heavy", "test-sleep", kind="merge", base_gb=0.1, settings={"hog_mb": 300}
    )
    huge = make_spec(tmp_path, "huge", "test-sleep", [0], memory_gb=40.0)
    _, first = await run_burst(redis_url, redis_prefix, [chunk, huge])
    _, reports = await run_burst(redis_url, redis_prefix, [merge, heavy])
    reports.update(first)

    assert reports[merge.job_id].outcomes == {"merge": "done"}
    assert reports[merge.job_id].report.limit_gb == 0.5
    merged = json.loads((merge.paths.task_paths().out / "merged.json").read_text())
    assert merged == ["unit-0.json", "unit-1.json"]
    assert reports[heavy.job_id].outcomes == {"merge": "killed"}
    assert reports[heavy.job_id].report.killed_for_memory is True
    refused = reports[huge.job_id]
    assert refused.outcomes == {0: "refused"}
    assert refused.error is not None
    assert "needs 40 GiB" in refused.error
    assert "2 GiB in all" in refused.error


async def test_stale_units_are_skipped_before_and_during_a_chunk(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Units whose current attempt in Redis is newer than the job's are reported "stale" and
    not computed: those known stale when the job starts, one marked stale while the chunk
    runs (checked again before each unit), and a job whose units are all stale."""
    keys = Keys(redis_prefix)
    spec = make_spec(tmp_path, "t", "test-sleep", [0, 1, 2], {"seconds": 0.8})
    gone = make_spec(tmp_path, "gone", "test-sleep", [0, 1], {})
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        await set_current_attempts(queue.redis, keys, RUN, "t", {1: 2, 0: 1})
        await set_current_attempts(queue.redis, keys, RUN, "gone", {0: 3, 1: 3})
        assert await queue.enqueue_many([spec, gone]) == [True, True]
        worker = make_container(redis_url, redis_prefix, store=tmp_path)
        run = asyncio.create_task(worker.run())
        out = spec.paths.task_paths().out
        # until unit 0 has started (setup is done) ...
        await until(
            lambda: list(out.glob("setup-*.txt")),
            timeout_s=30,
            what="the setup",
            check=still_running(run),
            poll_s=0.02,
        )
        # ... then dispatch unit 2 again: the running chunk must notice before unit 2.
        await set_current_attempts(queue.redis, keys, RUN, "t", {2: 2})
        await asyncio.wait_for(run, 30)
        reports = await all_reports(queue)
    finally:
        await queue.close()

    assert reports[spec.job_id].outcomes == {0: "done", 1: "stale", 2: "stale"}
    assert set(unit_records(out)) == {0}
    assert reports[gone.job_id].outcomes == {0: "stale", 1: "stale"}
    assert reports[gone.job_id].report.peak_memory_gb == ()


async def test_command_job_runs_through_simrun_exec(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A command job runs the type's argv template through simrun-exec: the command sees its
    settings file and output directory, and the report carries simrun-exec's measurements
    under the limit base + per-worker memory."""
    spec = make_spec(
        tmp_path,
        "copy",
        "test-copy",
        kind="command",
        settings={"units": 7},
        base_gb=0.25,
        memory_gb=0.5,
    )
    _, reports = await run_burst(redis_url, redis_prefix, [spec])

    entry = reports[spec.job_id]
    assert entry.outcomes == {"command": "done"}, entry.errors
    copied = json.loads((spec.paths.task_paths().out / "settings-copy.json").read_text())
    assert copied == {"units": 7}
    assert entry.report.limit_gb == 0.75
