"""Staged ports, local scratch, scratch_gb and checkpoints of units through the real
``simrun run`` (embedded mode), issue 15 items 1, 2, 3 and 5."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.support.cli_harness import clean_env, simrun
from tests.support.fake_engine import calls, install
from tests.support.staging_tasks import REFS

pytestmark = pytest.mark.e2e

PLUGINS = tuple(a for ref in REFS for a in ("--plugins", ref))
POOL = ("--processes", "2", "--worker-memory-gb", "2")

WORKFLOW = """
name: staging
sources:
  data: data.txt
tasks:
  - name: units
    type: stage-units
    settings: {units: 3, write_kb: 2048}
    inputs: {data: "source:data"}
    stage: [data]
    resources: {scratch_gb: 0.001}
  - name: resume
    type: resume
    settings: {units: 2, steps: 5, crash_after: 2}
    retries: 2
  - name: cmd
    type: stage-cmd
    inputs: {table: "units.out"}
    stage: [table]
"""


def run_dir(store: Path) -> Path:
    (found,) = (store / "runs").iterdir()
    return found


def test_staged_ports_scratch_and_checkpoints_end_to_end(tmp_path: Path) -> None:
    """One workflow in the embedded mode: a splittable task reads its staged source from
    ``<scratch>/data`` (a directory holding the source's file), its scratch existing before
    each unit; it writes past its scratch_gb, which the summary reports; a checkpointing
    task's units, killed once midway, resume from their checkpoint on the next attempt and
    do only the steps left; a command's ``{input}`` of a staged port is
    ``table=<scratch>/table``, exactly as the spec says, and the copy holds the upstream
    outputs. The summary shows what staging took."""
    (tmp_path / "data.txt").write_text("hello\n")
    (tmp_path / "wf.yaml").write_text(textwrap.dedent(WORKFLOW))
    ran = simrun("run", "wf.yaml", "--store", "st", *PLUGINS, *POOL, cwd=tmp_path, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rd = run_dir(tmp_path / "st")
    run_id = rd.name
    # the embedded worker's scratch: a directory of its own under its local directory,
    # <scratch dir>/<worker id>/<run>/<task>; the tasks done, theirs were removed
    first = json.loads((rd / "units" / "out" / "unit-0.json").read_text())
    local = Path(first["scratch"]).parent
    assert local.name == run_id
    assert local.parent.parent == tmp_path / "st" / "logs" / "worker-local" / "scratch"

    # the splittable task read its staged copy, a directory under its local scratch
    for i in range(3):
        unit = json.loads((rd / "units" / "out" / f"unit-{i}.json").read_text())
        assert unit["input"] == str(local / "units" / "data")
        assert (unit["input_is_dir"], unit["under_scratch"], unit["scratch_existed"]) == (
            True,
            True,
            True,
        )
        assert unit["text"] == "hello\n"

    # the checkpointing units resumed where they were killed
    for i in range(2):
        unit = json.loads((rd / "resume" / "out" / f"unit-{i}.json").read_text())
        assert (unit["resumed_from"], unit["steps_this_attempt"]) == (2, 3), unit
    assert not (rd / "resume" / "checkpoints").exists()  # gone once the task is done

    # the command's argv: <port>=<scratch>/<port> for the staged port
    argv = (rd / "cmd" / "out" / "argv.txt").read_text().splitlines()
    assert argv == [f"table={local / 'cmd' / 'table'}"]
    copied = sorted(p.name for p in (rd / "cmd" / "out" / "copied").iterdir())
    assert copied == ["unit-0.json", "unit-1.json", "unit-2.json"]

    # the summary: staging's bytes and time, and the scratch written past scratch_gb
    assert "staged" in ran.stdout, ran.stdout
    assert "scratch" in ran.stdout, ran.stdout
    assert "over 1 MiB asked" in ran.stdout, ran.stdout
    assert " B in " in ran.stdout, ran.stdout


def test_staging_scratch_an_image_and_checkpoints_in_one_workflow(tmp_path: Path) -> None:
    """Issue 15's workflow in the embedded mode: a staged port read by a splittable task
    with a scratch_gb, a checkpointing splittable task killed once midway, and a command in
    an image of its own, run through the container engine on PATH (the fake engine), whose
    staged port's ``{input}`` part is ``table=<scratch>/table`` in the engine's argv, as
    the spec says, with the local scratch mounted into the container."""
    (tmp_path / "data.txt").write_text("hello\n")
    (tmp_path / "wf.yaml").write_text(
        textwrap.dedent(WORKFLOW).replace("type: stage-cmd", "type: stage-cmd-image")
    )
    log = tmp_path / "engine.log"
    install(tmp_path / "bin", log)
    env = clean_env()
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    ran = simrun(
        "run", "wf.yaml", "--store", "st", *PLUGINS, *POOL, cwd=tmp_path, timeout=300, env=env
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rd = run_dir(tmp_path / "st")
    first = json.loads((rd / "units" / "out" / "unit-0.json").read_text())
    local = Path(first["scratch"]).parent
    assert first["input"] == str(local / "units" / "data")
    assert first["text"] == "hello\n"
    for i in range(2):
        unit = json.loads((rd / "resume" / "out" / f"unit-{i}.json").read_text())
        assert (unit["resumed_from"], unit["steps_this_attempt"]) == (2, 3), unit
    assert "over 1 MiB asked" in ran.stdout, ran.stdout
    (engine_run,) = [argv for argv in calls(log) if "run" in argv[:2]]
    assert "example/stage:1" in engine_run, engine_run
    staged = local / "cmd" / "table"
    assert f"table={staged}" in engine_run, engine_run
    mounts = {engine_run[i + 1] for i, a in enumerate(engine_run) if a == "-v"}
    assert any(staged.is_relative_to(m.split(":")[0]) for m in mounts), mounts
    argv = (rd / "cmd" / "out" / "argv.txt").read_text().splitlines()
    assert argv == [f"table={staged}"]
    assert len(list((rd / "cmd" / "out" / "copied").iterdir())) == 3


def test_a_task_asking_for_more_scratch_than_any_worker_has_is_blocked(tmp_path: Path) -> None:
    """A task whose scratch_gb no worker's local scratch has room for cannot run: `simrun
    run --dry-run` and `simrun run` say so before anything starts (exit non-zero), naming
    the scratch asked for and the most a worker has free. (The service's own block of such
    a task, from the workers' heartbeats: tests/integration/test_controller.py.)"""
    (tmp_path / "data.txt").write_text("hello\n")
    (tmp_path / "wf.yaml").write_text(
        textwrap.dedent(
            """
            sources: {data: data.txt}
            tasks:
              - name: big
                type: stage-units
                inputs: {data: "source:data"}
                resources: {scratch_gb: 100000}
            """
        )
    )
    for dry in (("--dry-run",), ()):
        ran = simrun(
            "run", "wf.yaml", "--store", "st", *PLUGINS, *POOL, *dry, cwd=tmp_path,
            timeout=300, env=clean_env(),
        )  # fmt: skip
        out = ran.stdout + ran.stderr
        assert ran.returncode != 0, out
        assert "needs 100000 GiB of local scratch" in out, out
        assert "GiB free" in out, out
    assert not (tmp_path / "st" / "runs").exists()  # nothing ran


def test_a_unit_writing_far_past_its_scratch_gb_is_stopped(tmp_path: Path) -> None:
    """A unit that writes far more local scratch than its task's scratch_gb (past the hard
    margin) is stopped, and fails with a message saying how much it wrote and how to ask
    for more."""
    (tmp_path / "data.txt").write_text("hello\n")
    (tmp_path / "wf.yaml").write_text(
        textwrap.dedent(
            """
            sources: {data: data.txt}
            tasks:
              - name: hog
                type: stage-units
                settings: {units: 1, write_kb: 307200, hold_s: 30}
                inputs: {data: "source:data"}
                resources: {scratch_gb: 0.001}
                retries: 0
            """
        )
    )
    ran = simrun("run", "wf.yaml", "--store", "st", *PLUGINS, *POOL, cwd=tmp_path, timeout=300)
    out = ran.stdout + ran.stderr
    assert ran.returncode != 0, out
    assert "GiB to its local scratch, past 0.251 GiB" in out, out
    assert "ask for more with resources: {scratch_gb: ...}" in out, out
    assert "for memory" not in out, out  # it was the scratch, not the memory


def test_simrun_run_puts_the_scratch_where_scratch_dir_says(tmp_path: Path) -> None:
    """`simrun run --scratch-dir DIR` gives its workers DIR as their local scratch
    directory: a unit's scratch and its staged input are under DIR/<worker id>/<run>/<task>
    (not under the store), and the forecast's room is DIR's."""
    (tmp_path / "data.txt").write_text("hello\n")
    (tmp_path / "wf.yaml").write_text(
        textwrap.dedent(
            """
            sources: {data: data.txt}
            tasks:
              - name: units
                type: stage-units
                settings: {units: 2}
                inputs: {data: "source:data"}
                stage: [data]
            """
        )
    )
    ran = simrun(
        "run", "wf.yaml", "--store", "st", "--scratch-dir", "local-disk", *PLUGINS, *POOL,
        cwd=tmp_path, timeout=300, env=clean_env(),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rd = run_dir(tmp_path / "st")
    unit = json.loads((rd / "units" / "out" / "unit-0.json").read_text())
    scratch = Path(unit["scratch"])
    assert scratch.is_relative_to(tmp_path / "local-disk"), scratch
    assert (scratch.parent.name, scratch.name) == (rd.name, "units")
    assert unit["input"] == str(scratch / "data")
