"""Forged jobs on a worker's queue (issue 23): a real burst worker container, a real Redis,
payloads put on the queue with arq's ``enqueue_job`` and simrun's serializer, signed with
the job key, as a sender holding the key could (a validly signed job of forged content).
Whatever the payload says, the worker runs only what its installed types say, in its own
store."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis, RedisSettings, create_pool

from simrun.core.reports import ReportEntry
from simrun.core.signing import JobCodec
from simrun.queues.client import JobQueue
from simrun.queues.keys import JOB_FUNCTION, Keys
from simrun.worker.pool.processes import ProcessPool
from tests.support import REPO, command_tasks
from tests.support.harness import (
    PLUGINS,
    RUN,
    all_reports,
    make_container,
    make_spec,
    start_worker_process,
)
from tests.support.keys import TEST_KEY

pytestmark = pytest.mark.e2e


async def forge(redis_url: str, prefix: str, payloads: list[dict[str, Any]]) -> None:
    """Put ``payloads`` on the cpu queue as they are (no `JobSpec` in between), signed."""
    codec = JobCodec(TEST_KEY)
    pool: ArqRedis = await create_pool(
        RedisSettings.from_dsn(redis_url), job_serializer=codec.serialize
    )
    keys = Keys(prefix)
    try:
        for n, payload in enumerate(payloads):
            job = await pool.enqueue_job(
                JOB_FUNCTION, payload, _job_id=f"{prefix}forged-{n}", _queue_name=keys.queue("cpu")
            )
            assert job is not None
    finally:
        await pool.aclose()


async def burst(
    redis_url: str, prefix: str, store: Path, payloads: list[dict[str, Any]]
) -> dict[str, ReportEntry]:
    """Forge ``payloads``, run a burst container of ``store`` until the queue is empty; the
    reports by job id."""
    await forge(redis_url, prefix, payloads)
    worker = make_container(redis_url, prefix, store=store, worker_id="guard")
    await asyncio.wait_for(worker.run(), 60)
    queue = await JobQueue.connect(redis_url, prefix, key=TEST_KEY)
    try:
        return await all_reports(queue)
    finally:
        await queue.close()


def refused(entry: ReportEntry, *words: str) -> None:
    """``entry`` is a job refused by worker "guard" for a reason that says ``words``."""
    assert set(entry.outcomes.values()) == {"refused"}, (entry.outcomes, entry.error)
    assert entry.error is not None
    assert entry.error.startswith("refused by worker guard: "), entry.error
    for word in words:
        assert word in entry.error, entry.error


def test_a_forged_command_job_of_a_type_without_command_runs_nothing(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A command job naming a splittable type (no command), carrying a ``command`` that
    touches a file of the sender's choosing, through a real ``simrun worker --burst``
    process: the file is never made, the report is "refused" naming the type and the
    worker, and the worker's log has one error line naming the job, its queue and why."""
    store, victim = tmp_path / "store", tmp_path / "pwned"
    spec = make_spec(store, "evil", "test-sleep", kind="command")
    payload = {**spec.to_dict(), "command": f"touch {victim}"}
    asyncio.run(forge(redis_url, redis_prefix, [payload]))
    proc = start_worker_process(
        redis_url, redis_prefix, "--burst", "--id", "guard", "--processes", "1", store=store
    )
    try:
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output.decode()

    async def reports() -> dict[str, ReportEntry]:
        queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
        try:
            return await all_reports(queue)
        finally:
            await queue.close()

    entry = asyncio.run(reports())[spec.job_id]
    assert not victim.exists()
    refused(entry, "task type 'test-sleep' has no command")
    lines = [line for line in output.decode().splitlines() if spec.job_id in line]
    assert len(lines) == 1, lines
    assert "ERROR" in lines[0]
    assert "from queue cpu" in lines[0]
    assert "has no command" in lines[0]
    assert not Path(spec.paths.task_dir).exists()  # a refused job writes nothing, logs neither


async def test_a_forged_command_string_never_runs_the_installed_template_does(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A command job of a type that has a command, carrying another ``command`` (a touch of
    a file of the sender's choosing): the worker runs the type's installed template (its
    output is there, and it is what simrun-exec's job file says), never the payload's (no
    such file)."""
    store, victim = tmp_path / "store", tmp_path / "pwned"
    spec = make_spec(store, "echo", "test-echo", kind="command", base_gb=0.25)
    payload = {**spec.to_dict(), "command": f"touch {victim}"}
    reports = await burst(redis_url, redis_prefix, store, [payload])

    assert reports[spec.job_id].outcomes == {"command": "done"}, reports[spec.job_id].error
    assert (Path(spec.paths.out) / "ran").read_text() == "installed\n"
    assert not victim.exists()
    # simrun-exec read its job file from the worker: the installed template, not the wire's
    (job_file,) = (Path(spec.paths.task_dir) / "logs").glob("attempt-1-*.job.json")
    assert json.loads(job_file.read_text())["command"] == command_tasks.ECHO.command


async def test_forged_paths_are_refused_and_nothing_is_written_outside_the_store(
    redis_url: str, redis_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Chunk jobs whose paths leave the worker's store are refused before anything runs, and
    nothing appears outside the store: an ``out`` elsewhere (absolute), an ``out`` and a
    ``task_dir`` climbing out with ``..``, another store, an input elsewhere, an input
    through a symlink inside the store that points out, a run or task name with ``..``, and
    a scratch elsewhere; each report names what is wrong, each log line the job."""
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret\n")
    sources = store / "runs" / RUN / "sources"
    sources.mkdir(parents=True)
    os.symlink(outside, sources / "link")
    climb = str(store / "runs" / RUN / "t" / ".." / ".." / ".." / ".." / "outside")

    def chunk(task: str, **paths: Any) -> dict[str, Any]:
        payload = make_spec(store, task, "test-sleep", [0, 1]).to_dict()
        return {**payload, "paths": {**payload["paths"], **paths}}

    good = make_spec(store, "fine", "test-sleep", [0])
    cases = {
        "out-abs": (chunk("out-abs", out=str(outside / "out")), "its out"),
        "out-climb": (chunk("out-climb", out=f"{climb}/out"), "its out"),
        "dir-climb": (chunk("dir-climb", task_dir=climb), "its task_dir"),
        "store": (chunk("store", store=str(outside)), "is not this worker's store"),
        "in-abs": (chunk("in-abs", inputs={"data": str(outside)}), "input 'data'"),
        "in-link": (chunk("in-link", inputs={"data": str(sources / "link")}), "input 'data'"),
        "scratch": (chunk("scratch", scratch=str(outside / "s")), "its scratch"),
    }
    bad_task = make_spec(store, "x", "test-sleep", [0]).to_dict()
    bad_task = {**bad_task, "task": "..", "job_id": None}
    bad_run = {**make_spec(store, "y", "test-sleep", [0]).to_dict(), "run": "../..", "job_id": None}
    payloads = [p for p, _ in cases.values()] + [bad_task, bad_run, good.to_dict()]
    with caplog.at_level(logging.ERROR, logger="simrun.worker.jobs"):
        reports = await burst(redis_url, redis_prefix, store, payloads)

    assert sorted(p.name for p in outside.iterdir()) == ["secret"]  # nothing written outside
    for name, (payload, words) in cases.items():
        job_id = payload["job_id"]
        refused(reports[job_id], words)
        said = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
        assert len(said) == 1, (name, said)
        assert "from queue cpu" in said[0]
    by_task = {e.task: e for e in reports.values()}
    refused(by_task[".."], "task name")
    refused(next(e for e in reports.values() if e.run == "../.."), "is not a run id")
    assert reports[good.job_id].outcomes == {0: "done"}  # the worker went on serving


async def test_a_job_of_a_type_not_installed_or_an_image_not_served_is_refused(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A chunk job naming a type this worker does not have is refused, naming the type and
    the worker (and what is installed); a command job of an image this worker does not
    serve, put on its cpu queue, is refused naming the image; a chunk job of a command type
    is refused too. None of them runs anything."""
    store = tmp_path / "store"
    unknown = make_spec(store, "u", "no-such-type", [0])
    image = make_spec(store, "i", "test-echo", kind="command").model_copy(
        update={"image": "attacker/evil:1"}
    )
    wrong_kind = make_spec(store, "k", "test-echo", [0])
    reports = await burst(
        redis_url, redis_prefix, store, [s.to_dict() for s in (unknown, image, wrong_kind)]
    )

    refused(reports[unknown.job_id], "task type 'no-such-type' is not installed", "test-sleep")
    refused(reports[image.job_id], "image 'attacker/evil:1'", "not one this worker serves")
    refused(reports[wrong_kind.job_id], "task type 'test-echo' runs a command")
    assert not (store / "runs" / RUN / "i" / "out" / "ran").exists()
    assert not (store / "runs").exists() or not any(
        (store / "runs" / RUN / t).exists() for t in ("u", "i", "k")
    )


def test_the_worker_lists_what_is_installed_in_a_process_of_its_own() -> None:
    """The installed types come from ``child --catalog``, a process of its own (plugin code
    never runs in the container): the entry points' types and the --plugin ones, each with
    its command template (None for a splittable type)."""
    pool = ProcessPool(1, plugins=PLUGINS, python_path=(str(REPO),))
    installed = asyncio.run(pool.catalog())
    assert installed["test-sleep"].command is None
    assert installed["test-echo"].command == command_tasks.ECHO.command
    assert installed["heat"].problem is None  # an entry point of simrun's examples
    assert installed["heat"].command is None
