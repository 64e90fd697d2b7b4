"""The container engine's command lines and the embedded mode's rule for tasks with an image
(`simrun.worker.engine`, `simrun.local.session.image_problem`): pure, no engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from simrun.local.session import image_problem, unit_images
from simrun.plugins import TaskType
from simrun.worker.engine import (
    inspect_argv,
    parse_oom,
    remove_argv,
    run_argv,
    worker_argv_in_image,
)
from simrun.workflow import WorkflowError, parse_workflow, program_problems


class _S(BaseModel):
    pass


def test_run_argv_bounds_memory_mounts_paths_as_themselves_and_passes_variables() -> None:
    """The engine runs the argv in the image under the job's memory limit (and no swap
    beyond it), each directory mounted at its own path (one inside another is mounted
    once, through its parent), the task directory as working directory, the variables by
    value, the image just before the argv."""
    argv = run_argv(
        "/usr/bin/docker",
        "solver:1",
        ["solve", "--out", "/st/runs/r/t/out"],
        name="simrun-x",
        limit_gb=1.5,
        workdir=Path("/st/runs/r/t"),
        mounts=[Path("/st"), Path("/st/runs/r/t"), Path("/scratch/t"), Path("/st/runs/r/a/out")],
        environ={"SIMRUN_PROCESSES": "2", "OMP_NUM_THREADS": "2"},
    )
    limit = str(int(1.5 * 2**30)) + "b"
    assert argv == [
        "/usr/bin/docker", "run", "--name", "simrun-x", "--memory", limit, "--memory-swap", limit,
        "-v", "/st:/st", "-v", "/scratch/t:/scratch/t", "-w", "/st/runs/r/t",
        "-e", "OMP_NUM_THREADS=2", "-e", "SIMRUN_PROCESSES=2",
        "solver:1", "solve", "--out", "/st/runs/r/t/out",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "oom"),
    [("true\n", True), ("True", True), ("false\n", False), ("", False), ("garbage", False)],
)
def test_only_true_means_oom_killed(text: str, oom: bool) -> None:
    """`inspect`'s answer is an OOM kill only when it says true."""
    assert parse_oom(text) is oom


def test_inspect_and_remove_name_the_container() -> None:
    """inspect asks for the OOMKilled state of the container; rm removes it even running."""
    assert inspect_argv("docker", "c") == [
        "docker", "inspect", "--format", "{{.State.OOMKilled}}", "c"
    ]  # fmt: skip
    assert remove_argv("podman", "c") == ["podman", "rm", "-f", "c"]


PLAIN = TaskType("plain", _S, command="true")
BOXED = TaskType("boxed", _S, command="solve {out}", image="solver:1")
SPLIT = TaskType("split", _S, image="py:1")
SPLIT2 = TaskType("split2", _S)


@pytest.mark.parametrize(
    ("tasks", "engine", "expected"),
    [
        ([("a", PLAIN)], None, None),
        ([("a", PLAIN), ("b", BOXED)], "/usr/bin/docker", None),
        ([("a", PLAIN), ("b", BOXED)], None, "task 'b' runs in image 'solver:1' and no container"),
        ([("c", SPLIT)], "/usr/bin/docker", None),
        ([("c", SPLIT)], None, "task 'c' runs in image 'py:1' and no container engine"),
    ],
)
def test_image_problem_table(
    tasks: list[tuple[str, TaskType]], engine: str | None, expected: str | None
) -> None:
    """On one machine a task with an image needs a container engine (a command runs in it
    per job, the units of a splittable type in a worker container of the image); tasks
    without an image need nothing. The problem is one line naming the task and image."""
    problem = image_problem(tasks, engine)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert problem.startswith(expected)
        assert "\n" not in problem


MISSING = TaskType("missing", _S, command="no-such-program-simrun-test {out}")


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("tasks:\n  - name: a\n    type: missing\n", 1),
        ("image: env:1\ntasks:\n  - name: a\n    type: missing\n", 0),
    ],
)
def test_a_program_is_looked_for_here_only_when_the_task_runs_here(
    text: str, problems: int
) -> None:
    """A command whose program is not on this machine is a problem, unless the task runs
    in an image (the workflow's environment image here): its program lives there."""
    doc = parse_workflow(text)
    assert len(program_problems(doc, {"missing": MISSING}, text)) == problems


def test_an_empty_or_spaced_environment_image_is_refused() -> None:
    """The workflow's image is a name without blanks."""
    for bad in ('""', '"a b"'):
        with pytest.raises(WorkflowError, match="image"):
            parse_workflow(f"image: {bad}\ntasks:\n  - name: a\n    type: missing\n")


def test_image_problem_and_unit_images_follow_the_runs_environment_image() -> None:
    """A type without an image runs in the run's: it needs the engine, and its units get a
    worker container of that image; a type's own image wins; commands get none."""
    assert image_problem([("a", PLAIN)], None, "env:1") is not None
    assert image_problem([("a", PLAIN)], "/usr/bin/docker", "env:1") is None
    assert unit_images([("c", SPLIT), ("d", SPLIT2)], "env:1") == ("env:1", "py:1")
    assert unit_images([("a", PLAIN), ("b", BOXED)], "env:1") == ()


def test_a_worker_of_an_image_runs_simrun_worker_inside_it_on_the_hosts_network() -> None:
    """The worker container of an image: removed when it ends, on the host's network (the
    embedded Redis listens on 127.0.0.1), bounded by the worker's memory, the store mounted
    at its own path, simrun as the entry point whatever the image's is."""
    argv = worker_argv_in_image(
        "docker",
        "py:3",
        ["--image", "py:3", "--store", "/st"],
        name="simrun-local-1-2",
        memory_gb=2.0,
        workdir=Path("/home/u/proj"),
        mounts=[Path("/st"), Path("/home/u/proj")],
        environ={"PYTHONUNBUFFERED": "1"},
    )
    assert argv == [
        "docker", "run", "--name", "simrun-local-1-2",
        "--memory", f"{2**31}b", "--memory-swap", f"{2**31}b",
        "-v", "/st:/st", "-v", "/home/u/proj:/home/u/proj", "-w", "/home/u/proj",
        "-e", "PYTHONUNBUFFERED=1", "--rm", "--network", "host", "--entrypoint", "simrun", "py:3",
        "worker", "--image", "py:3", "--store", "/st",
    ]  # fmt: skip
