"""Admission and routing in a real worker container: memory-weighted packing seen from the
times real units ran, GPU jobs on the GPU queue only, and payloads that must not run."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from arq.connections import RedisSettings, create_pool

from simrun.queues.client import JobQueue
from simrun.queues.keys import JOB_FUNCTION, Keys
from simrun.worker.capacity import detect_capacity
from tests.support.harness import make_spec, overlap, run_burst
from tests.support.keys import TEST_KEY
from tests.support.units import unit_records

pytestmark = pytest.mark.e2e


async def two_jobs(
    redis_url: str, prefix: str, store: Path, name: str, memory_gb: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two jobs of one 0.6 s unit and ``memory_gb`` each, run by a 1 GiB container of two
    processes: the records of their units (both must be done)."""
    specs = [
        make_spec(store, f"{name}{i}", "test-sleep", [0], {"seconds": 0.6}, memory_gb=memory_gb)
        for i in range(2)
    ]
    _, reports = await run_burst(redis_url, prefix, specs, memory_gb=1.0, processes=2)
    assert all(reports[s.job_id].outcomes == {0: "done"} for s in specs)
    first, second = (unit_records(s.paths.task_paths().out)[0] for s in specs)
    return first, second


async def test_jobs_that_do_not_fit_together_run_one_after_the_other(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """In a 1 GiB container with two processes, two jobs of 0.7 GiB each never run at the
    same time, while two jobs of 0.4 GiB each do."""
    first, second = await two_jobs(redis_url, redis_prefix, tmp_path, "big", memory_gb=0.7)
    assert not overlap(first, second)

    first, second = await two_jobs(redis_url, redis_prefix, tmp_path, "small", memory_gb=0.4)
    assert overlap(first, second)
    assert first["pid"] != second["pid"]


async def test_a_command_that_uses_cores_takes_every_slot(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A command job of a type that uses the cores of its container takes all process slots:
    a small chunk never runs beside it, although memory would allow it."""
    cores = make_spec(
        tmp_path,
        "cores",
        "test-timed",
        kind="command",
        uses_cores=True,
        base_gb=0.1,
        memory_gb=0.1,
    )
    chunk = make_spec(tmp_path, "beside", "test-sleep", [0], {"seconds": 0.6}, memory_gb=0.1)
    _, reports = await run_burst(redis_url, redis_prefix, [cores, chunk], memory_gb=4.0)

    assert reports[cores.job_id].outcomes == {"command": "done"}, reports[cores.job_id].errors
    assert reports[cores.job_id].report.limit_gb == pytest.approx(0.1 + 0.1 * 2)
    out = cores.paths.task_paths().out
    command_run = {
        "start": float((out / "start").read_text()),
        "end": float((out / "end").read_text()),
    }
    assert not overlap(command_run, unit_records(chunk.paths.task_paths().out)[0])


async def test_gpu_job_is_served_by_the_gpu_queue_only_and_gets_its_gpu(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A gpus=1 job waits on the GPU queue while a CPU container drains the CPU queue; a GPU
    container (one GPU detected from CUDA_VISIBLE_DEVICES) runs it with that device in
    CUDA_VISIBLE_DEVICES, and a CPU job in that container sees no GPU."""
    gpu_job = make_spec(tmp_path, "gpu", "test-sleep", [0], gpus=1)
    cpu_job = make_spec(tmp_path, "cpu", "test-sleep", [0])
    _, reports = await run_burst(redis_url, redis_prefix, [gpu_job, cpu_job], queues=("cpu",))
    assert reports[cpu_job.job_id].outcomes == {0: "done"}
    assert gpu_job.job_id not in reports
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        assert await queue.queued_job_ids("gpu") == [gpu_job.job_id]
    finally:
        await queue.close()

    capacity = detect_capacity(
        {"CUDA_VISIBLE_DEVICES": "GPU-fake-7,GPU-fake-8"}, memory_gb=2.0, processes=2, gpus=1
    )
    assert capacity.gpu_ids == ("GPU-fake-7",)
    later_cpu = make_spec(tmp_path, "cpu2", "test-sleep", [0])
    _, reports = await run_burst(
        redis_url,
        redis_prefix,
        [later_cpu],
        queues=("gpu", "cpu"),
        gpu_ids=capacity.gpu_ids,
    )
    assert reports[gpu_job.job_id].outcomes == {0: "done"}
    assert unit_records(gpu_job.paths.task_paths().out)[0]["cuda_visible_devices"] == "GPU-fake-7"
    assert reports[later_cpu.job_id].outcomes == {0: "done"}
    assert unit_records(later_cpu.paths.task_paths().out)[0]["cuda_visible_devices"] == ""


class _Evil:
    """A payload whose unpickling would create a directory (stands in for any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


async def test_a_pickled_payload_is_refused_without_running_it(
    redis_url: str, redis_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job written with arq's default pickle serializer is refused with a log that says
    so: the code in the pickle never runs, the job leaves the queue, and the container goes
    on to run the next (msgpack) job."""
    marker = tmp_path / "pickle-ran"
    keys = Keys(redis_prefix)
    pickling = await create_pool(RedisSettings.from_dsn(redis_url))  # pickle by default
    try:
        job = await pickling.enqueue_job(
            JOB_FUNCTION,
            _Evil(marker),
            _job_id=keys.arq_job_id("evil"),
            _queue_name=keys.queue("cpu"),
        )
        assert job is not None
        raw = await pickling.get(f"arq:job:{keys.arq_job_id('evil')}")
        assert raw is not None
        assert pickle.PROTO[0] == raw[0]  # it really is a pickle
    finally:
        await pickling.aclose()

    fine = make_spec(tmp_path, "fine", "test-sleep", [0])
    with caplog.at_level(logging.ERROR, logger="arq.worker"):
        _, reports = await run_burst(redis_url, redis_prefix, [fine])

    assert not marker.exists()
    assert "refused a pickled payload" in caplog.text
    assert reports[fine.job_id].outcomes == {0: "done"}
    queue = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        assert await queue.queued_job_ids("cpu") == []
    finally:
        await queue.close()
