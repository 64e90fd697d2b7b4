"""The GPU queue end to end through the real ``simrun run`` on a machine whose GPUs a fake
``nvidia-smi`` on PATH lists: a task with ``gpus: 1`` goes to the gpu queue, every worker
process gets its own device in ``CUDA_VISIBLE_DEVICES``, the GPUs are detected and
advertised, and the GPU memory of each job is measured next to its host memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli_harness import clean_env, simrun
from tests.support.fake_nvidia_smi import install

pytestmark = pytest.mark.e2e

WORKFLOW = "tasks:\n  - name: train\n    type: gpu-unit\n    settings: {units: 4}\n"


def test_each_process_gets_its_own_gpu_and_its_memory_is_measured(tmp_path: Path) -> None:
    """Two GPUs (fake nvidia-smi -L), one worker container of two processes: the plan puts
    the task on the gpu queue; each unit saw exactly one device, 0 or 1; the worker says it
    has 2 GPUs; the log of each job names its GPU and the 0.5 GiB its unit held there, and the run's
    summary shows that peak beside the host memory's."""
    state = tmp_path / "smi"
    install(tmp_path / "bin", state, gpus=2)
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW)
    env = clean_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["FAKE_SMI_DIR"] = str(state)  # where the units "use" GPU memory
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    ran = simrun("run", str(wf), "--store", "st", "--plugins", "tests.support.gpu_tasks:GPU_UNIT",
                 "--processes", "2", "--worker-memory-gb", "2", cwd=tmp_path, env=env,
                 timeout=240)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "gpu" in ran.stdout
    outs = sorted((tmp_path / "st" / "runs").glob("*/train/out/unit-*.txt"))
    assert len(outs) == 4
    assert {p.read_text() for p in outs} <= {"0", "1"}
    log = (tmp_path / "st" / "logs" / "worker-1.log").read_text()
    assert "2 GPUs" in log
    assert "GPU memory 0.5 GiB" in log
    assert "(GPU 512 MiB)" in ran.stdout  # the summary's peak: host, and on the GPUs
