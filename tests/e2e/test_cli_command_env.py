"""A command's program and environment through the real ``simrun`` command: a program that
lives beside simrun (its virtual environment, not activated) is found, a missing one is refused at
``validate`` and ``--dry-run``; and plugin code is told how many processes and threads it
was sized for."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_harness import clean_env, simrun, simrun_exe
from tests.support.env_tasks import read_env

pytestmark = pytest.mark.e2e

THREADS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
ENV_TYPES = ("CORES", "ONE", "UNIT")


def bare_path_env() -> dict[str, str]:
    """A user who did not activate the virtual environment: its bin is not on PATH."""
    env = clean_env(PATH="/usr/bin:/bin")
    assert str(Path(simrun_exe()).parent) not in env["PATH"].split(":")
    return env


def test_the_demo_runs_with_simrun_by_path_and_the_venv_not_activated(tmp_path: Path) -> None:
    """`.venv/bin/simrun run examples/heat.yaml` with a PATH lacking the venv's bin: the
    demo's `summary` command (simrun-heat-report, installed beside simrun) is found, by
    `validate`, `--dry-run` and the run, which succeeds."""
    heat = str(REPO / "examples" / "heat.yaml")
    env = bare_path_env()
    checked = simrun("validate", heat, cwd=tmp_path, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    dry = simrun("run", heat, "--dry-run", "--processes", "2", "--worker-memory-gb", "4",
                 cwd=tmp_path, env=env)  # fmt: skip
    assert dry.returncode == 0, dry.stdout + dry.stderr
    ran = simrun("run", heat, "--store", "st", "--processes", "2", "--worker-memory-gb", "4",
                 cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "succeeded" in ran.stdout
    reports = list((tmp_path / "st" / "runs").glob("*/summary/out/*"))
    assert reports, ran.stdout


PLUGIN = """
from pydantic import BaseModel
from simrun.plugins import TaskType

class Settings(BaseModel):
    pass

GONE = TaskType("gone", Settings, command="no-such-program-simrun-test {settings} {out}")
BOXED = TaskType("boxed", Settings, command="no-such-program-simrun-test {out}",
                 image="example/boxed:1")
"""


def test_a_command_whose_program_is_missing_is_refused_at_validate_and_dry_run(
    tmp_path: Path,
) -> None:
    """A task whose type's command names a program found neither on PATH nor beside simrun
    is an error of `simrun validate` and of `simrun run --dry-run` (exit 2, naming the line,
    the task, the type and the program), before anything runs; a type with an image of its
    own is not checked here (its program lives in the image)."""
    (tmp_path / "gone_mod.py").write_text(textwrap.dedent(PLUGIN))
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: first\n    type: gone\n  - name: boxed\n    type: boxed\n")
    env = bare_path_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    plugins = ("--plugins", "gone_mod:GONE", "--plugins", "gone_mod:BOXED")
    expected = (
        "line 3: task 'first', type: type 'gone': its command's program "
        "'no-such-program-simrun-test' is not found on PATH nor beside simrun"
    )
    for args in (("run", str(wf), "--dry-run", *plugins), ("run", str(wf), *plugins)):
        result = simrun(*args, cwd=tmp_path, env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert expected in result.stderr
        assert "task 'boxed'" not in result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "simrun-store").exists()


def test_validate_refuses_an_installed_type_whose_program_is_missing(tmp_path: Path) -> None:
    """`simrun validate` (installed types, no --plugins) names the task and the program."""
    (tmp_path / "gone_mod.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "gone_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gone-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[simrun.task_types]\ngone = gone_mod:GONE\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: first\n    type: gone\n")
    env = bare_path_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    result = simrun("validate", str(wf), cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "line 3: task 'first', type: type 'gone': its command's program "
        "'no-such-program-simrun-test' is not found on PATH nor beside simrun"
    ) in result.stderr


def run_env_types(tmp_path: Path, **env_more: str) -> Path:
    """Run the three `tests.support.env_tasks` types on 2 processes; the run's directory."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        "tasks:\n  - {name: cores, type: env-cores}\n  - {name: one, type: env-one}\n"
        "  - {name: unit, type: env-unit, settings: {units: 3}}\n"
    )
    plugins = [a for name in ENV_TYPES for a in ("--plugins", f"tests.support.env_tasks:{name}")]
    result = simrun("run", str(wf), "--store", "st", "--processes", "2", "--worker-memory-gb", "1",
                    *plugins, cwd=tmp_path, env=clean_env(**env_more))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "st" / "runs").iterdir()
    return run_dir


def test_commands_and_units_are_told_the_processes_and_threads_they_were_sized_for(
    tmp_path: Path,
) -> None:
    """On workers of 2 processes: a `uses_cores` command gets SIMRUN_PROCESSES=2 and every
    thread count 2; a command that does not, and every splittable unit (read from
    os.environ in its worker process), get 1."""
    run_dir = run_env_types(tmp_path)
    cores = read_env(run_dir / "cores" / "out" / "env.txt")
    one = read_env(run_dir / "one" / "out" / "env.txt")
    assert cores["SIMRUN_PROCESSES"] == "2"
    assert one["SIMRUN_PROCESSES"] == "1"
    for name in THREADS:
        assert (cores[name], one[name]) == ("2", "1"), name
    units = sorted((run_dir / "unit" / "out").glob("unit-*.txt"))
    assert len(units) == 3
    for path in units:
        seen = read_env(path)
        assert {n: seen[n] for n in ("SIMRUN_PROCESSES", *THREADS)} == dict.fromkeys(
            ("SIMRUN_PROCESSES", *THREADS), "1"
        ), path


def test_a_thread_count_the_user_set_for_the_worker_is_kept(tmp_path: Path) -> None:
    """OMP_NUM_THREADS=3 in the environment of `simrun run` is the user's choice: commands
    and units keep it, the other thread counts and SIMRUN_PROCESSES are still set."""
    run_dir = run_env_types(tmp_path, OMP_NUM_THREADS="3")
    cores = read_env(run_dir / "cores" / "out" / "env.txt")
    unit = read_env(run_dir / "unit" / "out" / "unit-0.txt")
    assert (cores["OMP_NUM_THREADS"], cores["MKL_NUM_THREADS"]) == ("3", "2")
    assert cores["SIMRUN_PROCESSES"] == "2"
    assert (unit["OMP_NUM_THREADS"], unit["MKL_NUM_THREADS"]) == ("3", "1")
