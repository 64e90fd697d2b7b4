"""simrun-exec running a command inside its image through a container engine (the fake one
of `tests.support.fake_engine`, which logs its argv and runs the command here), and through
a real engine where one answers (skipped elsewhere, saying why)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from simrun.plugins import TaskPaths
from simrun.worker.exec.main import exec_main
from simrun.worker.exec.spec import CommandResult, CommandSpec
from tests.support.fake_engine import calls, install

pytestmark = pytest.mark.e2e


def _run(tmp_path: Path, command: str, engine: str, image: str = "solver:1") -> CommandResult:
    paths = TaskPaths.for_task(tmp_path / "store", "run1", "task", {})
    spec = CommandSpec(
        command=command,
        settings={"n": 3},
        paths=paths,
        limit_gb=0.5,
        processes=2,
        image=image,
        engine=engine,
    )
    job, report = tmp_path / "job.json", tmp_path / "report.json"
    job.write_text(json.dumps(spec.to_dict()))
    exec_main(["--job", str(job), "--report", str(report)])
    return CommandResult.from_dict(json.loads(report.read_text()))


def test_a_command_with_an_image_runs_through_the_engine_with_its_limit_and_mounts(
    tmp_path: Path,
) -> None:
    """The command runs as `ENGINE run` of its image: the memory limit is the engine's, the
    store is mounted at its own path, the task directory is the working directory,
    SIMRUN_PROCESSES is passed in; its output lands in out/; the container is inspected and
    removed after."""
    log = tmp_path / "engine.log"
    engine = install(tmp_path / "bin", log)
    result = _run(tmp_path, 'sh -c \'echo "$SIMRUN_PROCESSES" > "$1/n.txt"\' sh {out}', str(engine))
    assert result.outcome == "done", result.error
    out = tmp_path / "store" / "runs" / "run1" / "task" / "out"
    assert (out / "n.txt").read_text().strip() == "2"
    run, inspect, rm = calls(log)
    store = str((tmp_path / "store").absolute())
    assert run[0] == "run"
    assert run[run.index("--memory") + 1] == f"{2**29}b"
    assert f"{store}:{store}" in run
    assert run[run.index("-w") + 1] == str(out.parent)
    assert "SIMRUN_PROCESSES=2" in run
    assert run[run.index("solver:1") + 1 :][:2] == ["sh", "-c"]
    name = run[run.index("--name") + 1]
    assert inspect[0] == "inspect"
    assert inspect[-1] == name
    assert rm == ["rm", "-f", name]
    assert result.argv is not None
    assert result.argv[1] == "run"


def test_the_engines_oom_kill_is_a_kill_for_memory(tmp_path: Path) -> None:
    """A container the engine's OOM killer ended (inspect says OOMKilled) is reported as
    killed for memory at the job's limit, so it is retried with more memory."""
    log = tmp_path / "engine.log"
    engine = install(tmp_path / "bin", log)
    result = _run(tmp_path, "sh -c 'exit 137'", str(engine))
    assert result.outcome == "killed"
    assert result.report.killed_for_memory
    assert result.report.peak_memory_gb == (0.5,)
    assert "OOM killer ended the command's container" in result.error


def _real_engine() -> str | None:
    """docker or podman on PATH whose daemon answers, else None."""
    for name in ("docker", "podman"):
        exe = shutil.which(name)
        if exe is None:
            continue
        try:
            done = subprocess.run([exe, "info"], capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return exe
    return None


def test_a_real_engine_runs_the_command_in_an_image(tmp_path: Path) -> None:
    """With a real engine: a busybox command writes into out/ through the mounted store."""
    exe = _real_engine()
    if exe is None:
        pytest.skip("no docker or podman whose daemon answers `info` on this machine")
    result = _run(tmp_path, "sh -c 'echo hi > \"$1/hi.txt\"' sh {out}", exe, image="busybox")
    if result.outcome != "done" and "Unable to find image" in result.error:
        pytest.skip("the engine cannot pull busybox here (no registry)")
    assert result.outcome == "done", result.error
    assert (tmp_path / "store/runs/run1/task/out/hi.txt").read_text().strip() == "hi"
