"""Stopping a real ``python -m simrun.cli worker`` process with SIGTERM, and what its heartbeat
says while it runs."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest

from simrun.core.reports import WorkerInfo
from simrun.queues.client import JobQueue
from tests.support.harness import all_reports, make_spec, start_worker_process
from tests.support.keys import TEST_KEY
from tests.support.units import unit_records
from tests.support.wait import until

pytestmark = pytest.mark.e2e


def _finish(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> tuple[int, str]:
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"the worker did not exit:\n{output.decode()}") from None
    return proc.returncode, output.decode()


async def test_sigterm_finishes_within_grace_then_hands_back(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """On SIGTERM a worker takes no new job, hands back at once the job still waiting for
    memory, lets running chunks go on for the grace period (a short chunk completes), then
    kills what still runs and reports its unfinished units "not_run"; it exits 0 and its
    heartbeat is gone. While it ran, its heartbeat showed its capacity and its jobs."""
    long = make_spec(tmp_path, "long", "test-sleep", list(range(10)), {"seconds": 0.4})
    short = make_spec(tmp_path, "short", "test-sleep", [0], {"seconds": 0.6})
    waiting = make_spec(tmp_path, "waiting", "test-sleep", [0, 1], memory_gb=1.6)
    later = make_spec(tmp_path, "later", "test-sleep", [0])
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    proc = start_worker_process(
        redis_url,
        redis_prefix,
        "--id",
        "stopper",
        "--worker-memory-gb",
        "2",
        "--processes",
        "2",
        "--grace-s",
        "1.0",
        "--heartbeat-s",
        "0.2",
        store=tmp_path,
    )
    try:
        assert await queue.enqueue_many([long, short]) == [True, True]
        await until(
            lambda: unit_records(long.paths.task_paths().out),
            timeout_s=20,
            what="both chunks to start",
        )
        assert await queue.enqueue(waiting)

        async def waiting_is_held() -> bool:
            workers = await queue.live_workers()
            return any(
                job.job_id == waiting.job_id and job.state == "waiting"
                for w in workers
                for job in w.running
            )

        await until(waiting_is_held, timeout_s=20, what="the big job to wait for memory")
        (info,) = await queue.live_workers()
        assert isinstance(info, WorkerInfo)
        assert (info.id, info.memory_gb, info.processes, info.queues) == (
            "stopper",
            2.0,
            2,
            ("cpu",),
        )
        # The short chunk may already be over on a loaded machine: the free memory is what
        # the chunks still running leave (0.5 GiB each), the waiting job holding none.
        running = {j.job_id for j in info.running}
        assert (
            {long.job_id, waiting.job_id} <= running <= {long.job_id, short.job_id, waiting.job_id}
        )
        chunks = len(running & {long.job_id, short.job_id})
        assert info.free_memory_gb == pytest.approx(2.0 - 0.5 * chunks)

        proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()

        async def stopping() -> bool:  # its heartbeat says so, or it is gone
            return all(w.stopping for w in await queue.live_workers())

        await until(stopping, timeout_s=10, what="the worker's heartbeat to say it stops")
        assert await queue.enqueue(later)  # taken by nobody: the worker takes no new job
        code, output = await asyncio.to_thread(_finish, proc)
        took_s = time.monotonic() - stopped_at
        reports = await all_reports(queue)
        workers = await queue.live_workers()
        queued = await queue.queued_job_ids("cpu")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await queue.close()

    assert code == 0, output
    assert took_s < 10, output
    assert reports[short.job_id].outcomes == {0: "done"}
    held = reports[waiting.job_id]
    assert held.outcomes == {0: "not_run", 1: "not_run"}
    assert held.error is not None
    assert "handed back" in held.error
    outcomes = reports[long.job_id].outcomes
    done = [i for i, o in outcomes.items() if o == "done"]
    handed_back = [i for i, o in outcomes.items() if o == "not_run"]
    assert len(done) + len(handed_back) == 10, outcomes
    assert done == list(range(len(done)))  # done in order, then the rest handed back
    assert len(done) >= 2
    assert len(handed_back) >= 2
    assert set(unit_records(long.paths.task_paths().out)) == set(done)
    assert later.job_id not in reports
    assert queued == [later.job_id]
    assert workers == []


def test_a_plugin_that_does_not_load_stops_the_worker_with_one_clear_error(
    redis_url: str, redis_prefix: str
) -> None:
    """A --plugins reference whose module cannot be imported ends ``simrun worker`` at
    start, naming the reference and the import error, instead of failing every job later."""
    proc = start_worker_process(
        redis_url, redis_prefix, "--plugins", "no_such_module:TASK", "--processes", "1"
    )
    code, output = _finish(proc)
    assert code == 1
    assert "plugin reference 'no_such_module:TASK'" in output
    assert "No module named 'no_such_module'" in output
