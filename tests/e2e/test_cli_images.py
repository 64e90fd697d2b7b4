"""Tasks with an image through the real ``simrun run`` (embedded mode): a command runs in its
image through the container engine found on PATH (the fake engine of
`tests.support.fake_engine`); with no engine, one line says so before anything starts and
``--dry-run`` exits non-zero; the units of a splittable type with an image are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli_harness import clean_env, run_id_in, simrun
from tests.support.fake_engine import calls, install

pytestmark = pytest.mark.e2e

PLUGIN = """
from pydantic import BaseModel
from simrun.plugins import ResourceHint, TaskType

class Settings(BaseModel):
    word: str = "hello"

BOXED = TaskType(
    "boxed", Settings,
    command="sh -c 'cat \\"$1\\" > \\"$2/settings.json\\"' sh {settings} {out}",
    image="example/solver:1",
    hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.25),
)
PLAIN = TaskType(
    "plain", Settings,
    command="sh -c 'echo plain > \\"$1/plain.txt\\"' sh {out}",
    hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.25),
)
"""
WORKFLOW = "tasks:\n  - name: solve\n    type: boxed\n    settings: {word: hi}\n"


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "boxed_mod.py").write_text(textwrap.dedent(PLUGIN))
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW)
    env = clean_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    return wf, env


def test_a_command_with_an_image_runs_through_the_engine_on_path(tmp_path: Path) -> None:
    """`simrun run` finds the engine (docker) on PATH; the task's command runs as `docker
    run ... example/solver:1 sh -c ...` with the store mounted and the memory limit given,
    and writes its output into the store; the run succeeds."""
    wf, env = _setup(tmp_path)
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    ran = simrun("run", str(wf), "--store", "st", "--plugins", "boxed_mod:BOXED",
                 "--processes", "1", "--worker-memory-gb", "2", cwd=tmp_path, env=env,
                 timeout=180)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "succeeded" in ran.stdout
    outs = list((tmp_path / "st" / "runs").glob("*/solve/out/settings.json"))
    assert len(outs) == 1
    assert '"hi"' in outs[0].read_text()
    runs = [c for c in calls(log) if c[0] == "run"]
    assert len(runs) == 1
    store = str((tmp_path / "st").resolve())
    assert f"{store}:{store}" in runs[0]
    assert "--memory" in runs[0]
    assert runs[0][runs[0].index("example/solver:1") + 1 :][:2] == ["sh", "-c"]


def test_without_an_engine_run_says_so_in_one_line_and_dry_run_fails(tmp_path: Path) -> None:
    """With no docker nor podman on PATH, `simrun run` stops before anything starts (no
    store is made) with one line naming the task and its image; `--dry-run` shows its
    forecast, says the same and exits non-zero."""
    wf, env = _setup(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env["PATH"] = str(empty)
    args = ("run", str(wf), "--plugins", "boxed_mod:BOXED", "--processes", "1",
            "--worker-memory-gb", "2")  # fmt: skip
    ran = simrun(*args, cwd=tmp_path, env=env)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    line = "task 'solve' runs in image 'example/solver:1' and no container engine was found"
    assert line in ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr
    assert "memory" not in (ran.stdout + ran.stderr).replace("--worker-memory-gb", "")
    assert not (tmp_path / "simrun-store").exists()
    dry = simrun(*args, "--dry-run", cwd=tmp_path, env=env)
    assert dry.returncode == 1, dry.stdout + dry.stderr
    assert line in dry.stdout


def test_a_task_without_an_image_runs_in_the_workflows_environment_image(tmp_path: Path) -> None:
    """The workflow's `image:` is the run's environment image: a task whose type has no
    image runs its command in it (through the engine), one with its own image in that."""
    wf, env = _setup(tmp_path)
    wf.write_text("image: example/env:2\n" + WORKFLOW + "  - name: other\n    type: plain\n")
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    ran = simrun("run", str(wf), "--store", "st", "--plugins", "boxed_mod:BOXED",
                 "--plugins", "boxed_mod:PLAIN", "--processes", "1", "--worker-memory-gb", "2",
                 cwd=tmp_path, env=env, timeout=180)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert list((tmp_path / "st" / "runs").glob("*/other/out/plain.txt"))
    images = sorted(
        next(a for a in c if a in ("example/env:2", "example/solver:1"))
        for c in calls(log)
        if c[0] == "run"
    )
    assert images == ["example/env:2", "example/solver:1"]


OOM_PLUGIN = """
from pydantic import BaseModel
from simrun.plugins import ResourceHint, TaskType

class Settings(BaseModel):
    pass

HOG = TaskType(
    "hog", Settings, command="sh -c 'exit 137'", image="example/solver:1",
    hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.25),
)
"""


def test_the_engines_oom_kill_is_a_kill_for_memory_and_retried_with_more(tmp_path: Path) -> None:
    """A container the engine's OOM killer ends (the fake engine: exit 137 and inspect says
    OOMKilled) is a unit killed for memory: it runs again with more memory (the engine's
    --memory grows) until the kills allowed are spent or its memory outgrows the workers,
    and the run ends saying so."""
    (tmp_path / "hog_mod.py").write_text(textwrap.dedent(OOM_PLUGIN))
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: hog\n    type: hog\n")
    env = clean_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    ran = simrun("run", str(wf), "--store", "st", "--plugins", "hog_mod:HOG", "--processes", "1",
                 "--worker-memory-gb", "2", "--max-kills", "2", cwd=tmp_path, env=env,
                 timeout=180)  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr
    # it ends failed for its kills, or blocked: its next retry needs more than a worker has
    assert "killed for memory" in ran.stdout or "blocked: needs" in ran.stdout, ran.stdout
    limits = [int(c[c.index("--memory") + 1].rstrip("b")) for c in calls(log) if c[0] == "run"]
    assert len(limits) >= 2
    assert limits == sorted(limits)
    assert limits[-1] > limits[0]


UNITS_PLUGIN = """
import os
from pydantic import BaseModel
from simrun.plugins import ResourceHint, TaskType

class Settings(BaseModel):
    units: int = 3

def count_units(settings):
    return settings.units

def compute_unit(settings, index, paths):
    paths.out.mkdir(parents=True, exist_ok=True)
    (paths.out / f"unit-{index}.txt").write_text(str(os.getppid()))

SPLIT = TaskType(
    "split", Settings, count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:compute_unit", image="example/py:3",
    hint=ResourceHint(memory_base_gb=0.1, memory_per_worker_gb=0.1),
)
"""


def test_the_units_of_a_splittable_type_run_in_a_worker_container_of_its_image(
    tmp_path: Path,
) -> None:
    """On one machine the units of a type with an image run in a worker container started
    inside the image through the engine (`ENGINE run --rm --network host --memory …
    --entrypoint simrun IMAGE worker --image IMAGE …`, the store mounted), which serves that
    image's queue alone; the run succeeds; without an engine it is refused in one line."""
    (tmp_path / "split_mod.py").write_text(textwrap.dedent(UNITS_PLUGIN))
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: sweep\n    type: split\n")
    env = clean_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    args = ("run", str(wf), "--store", "st", "--plugins", "split_mod:SPLIT", "--processes", "1",
            "--worker-memory-gb", "1")  # fmt: skip
    ran = simrun(*args, cwd=tmp_path, env=env, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert len(list((tmp_path / "st" / "runs").glob("*/sweep/out/unit-*.txt"))) == 3
    (run,) = [c for c in calls(log) if c[0] == "run"]
    store = (tmp_path / "st").resolve()
    mounts = [Path(run[i + 1].partition(":")[0]) for i, a in enumerate(run) if a == "-v"]
    assert any(m == store or m in store.parents for m in mounts)  # the store, or above it
    assert run[run.index("--network") + 1] == "host"
    assert run[run.index("--memory") + 1] == f"{2**30}b"
    tail = run[run.index("--entrypoint") :]
    assert tail[:4] == ["--entrypoint", "simrun", "example/py:3", "worker"]
    assert tail[tail.index("--image") + 1] == "example/py:3"
    assert "--queue" not in tail
    logs = tmp_path / "st" / "logs"
    serving = {
        name: [line for line in (logs / name).read_text().splitlines() if " serving " in line]
        for name in ("worker-1.log", "worker-2.log")
    }
    # the image's worker (the last log) serves its queue alone; the host worker, when it
    # got as far as saying what it serves before the run ended, not the image's queue
    assert serving["worker-2.log"], (logs / "worker-2.log").read_text()
    assert all("serving image:example_py_3" in line for line in serving["worker-2.log"])
    assert not any("image:" in line for line in serving["worker-1.log"]), serving
    env["PATH"] = str(tmp_path / "empty")
    refused = simrun(*args, cwd=tmp_path, env=env)
    assert refused.returncode == 1
    assert "task 'sweep' runs in image 'example/py:3' and no container engine" in refused.stderr


API_SCRIPT = """
import sys, simrun
from simrun import LocalError
wf, store = sys.argv[1], sys.argv[2]
try:
    result = simrun.run_local(wf, store=store, plugins=["boxed_mod:BOXED", "boxed_mod:PLAIN"],
                              processes=1, memory_gb=2, progress=False)
    print("state", result.state)
except LocalError as exc:
    print("refused:", exc)
if len(sys.argv) > 3:  # without redis-server on PATH: no session
    sys.exit(0)
with simrun.LocalSession(store + "-session", plugins=["boxed_mod:BOXED", "boxed_mod:PLAIN"],
                         processes=1, memory_gb=2) as session:
    try:
        session.submit(wf)
        print("submitted")
    except LocalError as exc:
        print("session refused:", exc)
"""


def test_the_python_api_runs_images_as_simrun_run_does(tmp_path: Path) -> None:
    """`simrun.run_local` runs a workflow with an environment image through the engine on
    PATH, as `simrun run` does (a worker for the image started with the session); without an
    engine it raises `LocalError` naming the task before anything starts; a `LocalSession`
    started without the workflow refuses to submit one whose environment image it has no
    worker for, saying to use run_local."""
    wf, env = _setup(tmp_path)
    wf.write_text("image: example/env:2\n" + WORKFLOW + "  - name: other\n    type: plain\n")
    (tmp_path / "api.py").write_text(API_SCRIPT)
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    with_engine = {**env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"}
    ran = subprocess.run(
        [sys.executable, "api.py", str(wf), "st"], cwd=tmp_path, env=with_engine,
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "state succeeded" in ran.stdout, ran.stdout + ran.stderr
    assert "session refused: this session has no worker for the workflow's environment" in (
        ran.stdout
    ), ran.stdout
    assert "example/env:2" in ran.stdout.split("session refused:")[1], ran.stdout
    images = {a for c in calls(log) if c[0] == "run" for a in c if a.startswith("example/")}
    assert images == {"example/env:2", "example/solver:1"}

    empty = tmp_path / "empty-bin"  # no engine (this machine may have a docker client)
    empty.mkdir()
    without = subprocess.run(
        [sys.executable, "api.py", str(wf), "st-none", "no-session"], cwd=tmp_path,
        env={**env, "PATH": str(empty)},
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert without.returncode == 0, without.stdout + without.stderr
    assert "refused: task 'solve' runs in image 'example/solver:1'" in without.stdout or (
        "refused: task 'other' runs in image 'example/env:2'" in without.stdout
    ), without.stdout
    assert "no container engine was found" in without.stdout
    assert not (tmp_path / "st-none").exists()  # refused before anything started


def test_a_replay_of_a_run_with_an_image_needs_an_engine_too(tmp_path: Path) -> None:
    """A run whose task has an image, replayed on this machine (`simrun replay RUN --task
    T --all --store`) where no container engine is found, stops before anything starts
    with the one line a new run gives; the task's output is left as it was."""
    wf, env = _setup(tmp_path)
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    with_engine = {**env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"}
    ran = simrun("run", str(wf), "--store", "st", "--plugins", "boxed_mod:BOXED",
                 "--processes", "1", "--worker-memory-gb", "2", cwd=tmp_path,
                 env=with_engine, timeout=180)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_id = run_id_in(ran.stdout)
    (out,) = (tmp_path / "st" / "runs").glob("*/solve/out/settings.json")
    before = out.stat().st_mtime_ns
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    replayed = simrun("replay", run_id, "--task", "solve", "--all", "--store", "st",
                      "--plugins", "boxed_mod:BOXED", cwd=tmp_path,
                      env={**env, "PATH": str(empty)}, timeout=120)  # fmt: skip
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    line = "task 'solve' runs in image 'example/solver:1' and no container engine was found"
    assert line in replayed.stderr, replayed.stderr
    assert "Traceback" not in replayed.stderr
    assert out.exists()
    assert out.stat().st_mtime_ns == before
