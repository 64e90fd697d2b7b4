"""What ``simrun validate`` and ``simrun run --dry-run`` say of a workflow before anything
runs, through the real command: a misspelled setting or field, a bad command template, a
``--set``, a pool that cannot run a task, and the count of tasks."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support import REPO
from tests.support.cli_harness import WORK, clean_env, simrun

pytestmark = pytest.mark.e2e

PLUGIN = """
from pydantic import BaseModel
from simrun.plugins import TaskType

class Settings(BaseModel):
    precision: str = "low"

MC = TaskType("mc", Settings, command={command!r})
"""


def install_plugin(root: Path, command: str) -> None:
    """A distribution ``mc-plugin`` in ``root`` (on PYTHONPATH) registering type ``mc``
    whose settings model ignores unknown names (pydantic's default) and whose command
    template is ``command``."""
    (root / "mc_plugin_mod.py").write_text(textwrap.dedent(PLUGIN.format(command=command)))
    info = root / "mc_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mc-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[simrun.task_types]\nmc = mc_plugin_mod:MC\n")


def env_with(root: Path) -> dict[str, str]:
    env = clean_env()
    env["PYTHONPATH"] = f"{root}:{env['PYTHONPATH']}"
    return env


def test_a_misspelled_setting_is_refused_with_did_you_mean(tmp_path: Path) -> None:
    """`simrun validate` refuses `precison: high` for a model that would silently ignore it,
    naming the task, the line and the setting it meant; exit 2."""
    install_plugin(tmp_path, "mc {settings} {out}")
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: sweep\n    type: mc\n    settings:\n      precison: high\n")
    result = simrun("validate", str(wf), cwd=tmp_path, env=env_with(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "line 5: task 'sweep', settings.precison: unknown setting 'precison' "
        "(did you mean 'precision'?)"
    ) in result.stderr


def test_a_bad_command_template_is_refused_at_load_naming_the_entry_point(
    tmp_path: Path,
) -> None:
    """A type whose command uses `{setting}` (not a placeholder) is refused when the types
    are loaded, by `simrun validate`, naming the entry point and its distribution."""
    install_plugin(tmp_path, "mc --config {setting} {out}")
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: sweep\n    type: mc\n")
    result = simrun("validate", str(wf), cwd=tmp_path, env=env_with(tmp_path))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "entry point 'mc' = 'mc_plugin_mod:MC' (distribution mc-plugin)" in result.stderr
    assert "unknown placeholder '{setting}'" in result.stderr
    assert "Traceback" not in result.stderr


def test_dry_run_exits_non_zero_when_a_task_cannot_run_on_the_pool(tmp_path: Path) -> None:
    """`simrun run --dry-run` on a pool too small for a task prints why and exits 2 (a CI
    check); on a pool that fits it exits 0."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: work\n    type: svc-work\n    settings: {units: 2}\n")
    args = ("run", str(wf), "--plugins", WORK, "--dry-run", "--processes", "2")
    small = simrun(*args, "--worker-memory-gb", "0.1", cwd=tmp_path)
    assert small.returncode == 2, small.stdout + small.stderr
    assert "task 'work' cannot run on this pool: needs 0.25 GiB per process" in small.stdout
    assert "dry run failed: the pool cannot run 'work'" in small.stdout
    fits = simrun(*args, "--worker-memory-gb", "2", cwd=tmp_path)
    assert fits.returncode == 0, fits.stdout + fits.stderr


def test_set_changes_a_setting_typed_and_checked_like_the_file(tmp_path: Path) -> None:
    """`simrun run --set work.units=5 --dry-run` counts the units of the value given (an
    int by YAML's rules); a value the settings model refuses, and a misspelled setting,
    are errors like the file's that name the --set; `simrun validate --set` agrees."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("tasks:\n  - name: work\n    type: svc-work\n    settings: {units: 2}\n")
    base = ("run", str(wf), "--plugins", WORK, "--dry-run", "--processes", "1")
    five = simrun(*base, "--worker-memory-gb", "2", "--set", "work.units=5", cwd=tmp_path)
    assert five.returncode == 0, five.stdout + five.stderr
    row = next(line for line in five.stdout.splitlines() if line.startswith("work "))
    assert row.split()[:3] == ["work", "svc-work", "5"]
    bad = simrun(*base, "--set", "work.units=many", "--set", "work.unts=3", cwd=tmp_path)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert (
        "task 'work', settings.units: Input should be a valid integer, unable to parse "
        "string as an integer (from --set work.units=many)"
    ) in bad.stderr
    assert (
        "task 'work', settings.unts: unknown setting 'unts' (did you mean 'units'?) "
        "(from --set work.unts=3)"
    ) in bad.stderr
    nowhere = simrun(*base, "--set", "wrk.units=3", cwd=tmp_path)
    assert nowhere.returncode == 2
    assert "--set wrk.units=3: no task 'wrk' (did you mean 'work'?)" in nowhere.stderr
    install_plugin(tmp_path, "true {settings} {out}")  # a program validate finds
    mc = tmp_path / "mc.yaml"
    mc.write_text("tasks:\n  - name: sweep\n    type: mc\n")
    env = env_with(tmp_path)
    ok = simrun("validate", str(mc), "--set", "sweep.precision=high", cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert '"precision": "high"' in ok.stdout


def test_a_misspelled_top_level_field_says_did_you_mean(tmp_path: Path) -> None:
    """`task:` at the top of a workflow is refused with "did you mean 'tasks'?" (and a
    task's `typ:` with 'type'), naming the line; exit 2."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("task:\n  - name: work\n    typ: svc-work\n")
    result = simrun("validate", str(wf), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "line 1: task: unknown field (did you mean 'tasks'?)" in result.stderr
    wf.write_text("tasks:\n  - name: work\n    typ: svc-work\n")
    result = simrun("validate", str(wf), cwd=tmp_path)
    assert "line 3: task 'work', typ: unknown field (did you mean 'type'?)" in result.stderr


def test_validate_counts_its_tasks_in_words(tmp_path: Path) -> None:
    """`simrun validate` says "1 task" for one task and "2 tasks" for two (it said
    "1 tasks")."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    demo = yaml.safe_load((tmp_path / "examples" / "heat.yaml").read_text())
    demo["tasks"] = demo["tasks"][:1]
    (tmp_path / "examples" / "one.yaml").write_text(yaml.safe_dump(demo))
    one = simrun("validate", "examples/one.yaml", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert ", 1 task\n" in one.stdout
    two = simrun("validate", "examples/heat.yaml", cwd=tmp_path)
    assert two.returncode == 0, two.stderr
    assert ", 2 tasks\n" in two.stdout


def test_a_dotted_task_name_is_refused_by_validate_and_the_dry_run(tmp_path: Path) -> None:
    """A task named ``heat.sweep`` (read as ``heat.sweep.out``) is refused by `simrun
    validate` and by `simrun run --dry-run` alike, naming the task and field: exit 2, no
    traceback (the dry run ended in a KeyError)."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    wf = tmp_path / "examples" / "heat.yaml"
    text = wf.read_text().replace("name: sweep", "name: heat.sweep")
    wf.write_text(text.replace('"sweep.out"', '"heat.sweep.out"'))
    expected = "task 'heat.sweep', name: task name 'heat.sweep' contains '.'"
    for args in (("validate",), ("run", "--dry-run")):
        result = simrun(*args, "examples/heat.yaml", cwd=tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert expected in result.stderr, result.stdout + result.stderr
        assert "KeyError" not in result.stderr
        assert "Traceback" not in result.stderr
