"""Planning a run from a workflow and building its jobs (simrun.service.submit, .dispatch),
with the example task types and real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.core.layout import StoreLayout
from simrun.core.states import UnitRow
from simrun.core.wire import RUN_ID
from simrun.plugins import load_task_types
from simrun.resources import RETRY_FACTOR, ResolvedResources
from simrun.runstore.rows import TaskRow
from simrun.service.packing import build_jobs, memory_groups
from simrun.service.submit import copy_sources, new_run_id, plan_run
from simrun.workflow import WorkflowError, check_workflow, load_workflow, source_paths
from tests.support import REPO

HEAT = REPO / "examples" / "heat.yaml"
TYPES = load_task_types()
RESOLVED = ResolvedResources(0.5, 1.0, 0.0, 0, 0.05, 3, "learned from 1 runs")


def planned(tmp_path: Path):
    doc = load_workflow(HEAT)
    settings = check_workflow(doc, TYPES)
    sources = source_paths(doc, HEAT.parent)
    run_dir = tmp_path / "runs" / "r1"
    layout = StoreLayout(tmp_path)
    return doc, sources, run_dir, plan_run("r1", doc, settings, TYPES, layout, sources, "t", 5.0)


def test_plan_wires_inputs_to_copies_and_outputs(tmp_path: Path):
    """A planned run lists tasks in graph order; a source port reads the source's copy in
    the run, a task port the upstream task's output directory."""
    _, _, run_dir, run = planned(tmp_path)
    assert [t.name for t in run.tasks] == ["sweep", "summary"]
    sweep, summary = run.tasks
    # a source port reads the source's directory (the spec's "directory of the output it
    # reads"); the file is in it under its own name
    assert sweep.inputs == {"plate": str(run_dir / "sources" / "plate")}
    assert summary.inputs == {"table": str(run_dir / "sweep" / "out")}
    assert (sweep.splittable, sweep.has_merge, summary.splittable) == (True, True, False)
    assert summary.depends == ("sweep",)
    assert sweep.settings["grid"] == 64
    assert (run.model, run.name, run.document) == ("plate", "heat-demo", "t")


def test_sources_are_copied(tmp_path: Path):
    """Copying puts every source in the directory the tasks' inputs point to, under the
    original's name, with the same bytes: the input is a directory, the file inside it."""
    _, sources, _, run = planned(tmp_path)
    copy_sources(StoreLayout(tmp_path), "r1", sources)
    port = Path(run.tasks[0].inputs["plate"])
    assert port.is_dir()
    assert [p.name for p in port.iterdir()] == ["plate.json"]
    copied = port / "plate.json"
    assert copied.read_bytes() == (REPO / "examples" / "plate.json").read_bytes()


def test_missing_source_is_named(tmp_path: Path):
    """A source file that does not exist is an error naming the source and the path."""
    doc = load_workflow(HEAT)
    with pytest.raises(WorkflowError, match=r"sources\.plate: file not found: .*nowhere"):
        source_paths(doc, tmp_path / "nowhere")


def test_type_not_installed_is_named(tmp_path: Path):
    """A task whose type the service does not have is refused, naming the task."""
    doc = load_workflow(HEAT)
    settings = check_workflow(doc, TYPES)
    only_heat = {"heat": TYPES["heat"]}
    with pytest.raises(WorkflowError, match="task 'summary', type: task type 'report' is not"):
        plan_run("r1", doc, settings, only_heat, StoreLayout(tmp_path), {"plate": HEAT}, "", 1.0)


def test_run_ids_sort_by_time():
    """Run ids start with the UTC time of submission, so they sort by it."""
    assert new_run_id(0.0, "abc123") == "19700101-000000-abc123"
    assert new_run_id(86400.0, "x") > new_run_id(0.0, "y")
    assert RUN_ID.fullmatch(new_run_id())  # the shape the attempts hashes are read with


def task_row(name: str, splittable: bool, inputs: dict[str, str]) -> TaskRow:
    return TaskRow(
        run="r1", name=name, position=0, type="heat" if splittable else "report",
        settings={"grid": 8}, inputs=inputs, depends=(), override=None,
        memory_override_gb=None, splittable=splittable, has_merge=splittable,
        state="running", status="", queue=None, resource_key="heat/plate/8", resources=None,
        units=4, started_s=1.0, finished_s=None,
    )  # fmt: skip


def unit(index: int, attempt: int, kind: str = "chunk", kills: int = 0, mem=None) -> UnitRow:
    return UnitRow("r1", "sweep", index, kind, "pending", attempt, kills=kills, memory_gb=mem)  # type: ignore[arg-type]


def test_chunk_jobs(tmp_path: Path):
    """Chunk jobs carry their indices, an attempt above their units', the resolved memory
    per process and the task's paths; the stored job and the payload agree."""
    task = task_row("sweep", True, {"plate": "/x/plate.json"})
    jobs = build_jobs(
        tmp_path, task, TYPES["heat"], RESOLVED, "cpu", [[unit(0, 0), unit(1, 2)], [unit(2, 0)]]
    )
    first, second = jobs
    assert (first.spec.indices, first.spec.attempt, first.job.attempt) == ((0, 1), 3, 3)
    assert first.job.id == first.spec.job_id == "r1:sweep:0:3"
    assert (second.job.indices, second.spec.job_id) == ((2,), "r1:sweep:2:1")
    assert first.spec.resources.memory_per_worker_gb == first.job.memory_gb == 1.0
    assert first.spec.paths.out == str(tmp_path / "runs" / "r1" / "sweep" / "out")
    assert first.spec.paths.inputs == {"plate": "/x/plate.json"}
    assert first.spec.resources.seconds_per_unit == 0.05


def test_merge_after_a_kill_gets_more_memory(tmp_path: Path):
    """A merge job that was killed for memory goes again with at least RETRY_FACTOR times
    the limit it had."""
    task = task_row("sweep", True, {})
    (job,) = build_jobs(
        tmp_path, task, TYPES["heat"], RESOLVED, "cpu", [[unit(-1, 1, "merge", kills=1, mem=2.0)]]
    )
    assert job.spec.kind == "merge"
    assert job.spec.indices == ()
    assert job.spec.resources.memory_base_gb == pytest.approx(2.0 * RETRY_FACTOR)
    assert job.job.indices == (-1,)


def test_command_job(tmp_path: Path):
    """An unsplit task's job carries no command: the worker runs its installed type's."""
    task = task_row("summary", False, {"table": "/x/sweep/out"})
    (job,) = build_jobs(tmp_path, task, TYPES["report"], RESOLVED, "cpu", [[unit(0, 0, "command")]])
    assert (job.spec.kind, job.spec.job_id) == ("command", "r1:summary:command:1")
    assert "command" not in job.spec.to_dict()


def test_a_job_of_mixed_kinds_is_refused(tmp_path: Path):
    """Units of different kinds never share a job."""
    task = task_row("sweep", True, {})
    with pytest.raises(ValueError, match="mixes units"):
        build_jobs(
            tmp_path, task, TYPES["heat"], RESOLVED, "cpu", [[unit(0, 0), unit(-1, 0, "merge")]]
        )


def test_killed_units_go_in_their_own_chunks_with_more_memory(tmp_path: Path):
    """Units killed before are grouped apart from fresh ones, and their jobs ask at least
    RETRY_FACTOR times the limit of their last attempt even when the key resolves lower."""
    units = [unit(0, 1), unit(1, 2, kills=1, mem=2.0), unit(2, 0), unit(3, 3, kills=2, mem=2.0)]
    groups = memory_groups(units, RESOLVED.memory_per_worker_gb)
    assert [[u.index for u in g] for g in groups] == [[0, 2], [1, 3]]
    task = task_row("sweep", True, {})
    fresh, killed = build_jobs(tmp_path, task, TYPES["heat"], RESOLVED, "cpu", groups)
    assert fresh.spec.resources.memory_per_worker_gb == RESOLVED.memory_per_worker_gb
    assert killed.spec.resources.memory_per_worker_gb == pytest.approx(2.0 * RETRY_FACTOR)
    assert killed.job.memory_gb == pytest.approx(2.0 * RETRY_FACTOR)
    assert killed.spec.attempt == 4
