"""The environment image of a run (issue 15 item 4): the workflow's ``image:``, else the
service's ``--environment-image``; a task whose type has no image runs in it (its jobs go
to that image's queue), one with an image of its own in that one. Stored with the run."""

from __future__ import annotations

from pathlib import Path

from simrun.core.layout import StoreLayout
from simrun.plugins import load_task_types
from simrun.runstore.rows import RunRow
from simrun.runstore.store import RunStore
from simrun.service.packing import build_jobs
from simrun.service.submit import plan_run
from simrun.workflow import check_workflow, load_workflow, source_paths
from tests.integration.test_service_submit import RESOLVED
from tests.support import REPO

HEAT = REPO / "examples" / "heat.yaml"
TYPES = load_task_types()


def _plan(tmp_path: Path, text_image: str | None, default: str | None):
    text = HEAT.read_text()
    if text_image is not None:
        text = f"image: {text_image}\n{text}"
    path = tmp_path / "heat.yaml"
    path.write_text(text)
    doc = load_workflow(path)
    settings = check_workflow(doc, TYPES)
    sources = source_paths(doc, HEAT.parent)
    layout = StoreLayout(tmp_path / "store")
    return plan_run(
        "r1", doc, settings, TYPES, layout, sources, text, 1.0, environment_image=default
    )


def test_the_workflow_image_wins_over_the_service_default(tmp_path: Path) -> None:
    """The document's image is the run's; without one the service's default is; without
    both the run has none."""
    assert _plan(tmp_path, "env:2", "default:1").image == "env:2"
    assert _plan(tmp_path, None, "default:1").image == "default:1"
    assert _plan(tmp_path, None, None).image is None


def test_a_task_without_an_image_runs_in_the_runs_image() -> None:
    """A type's own image is kept; a type without one runs in the run's."""
    run = RunRow("r", None, "m", "running", "", "", 0.0, 0.0, None, image="env:2")
    assert run.task_image(None) == "env:2"
    assert run.task_image("solver:1") == "solver:1"
    assert RunRow("r", None, "m", "running", "", "", 0.0, 0.0, None).task_image(None) is None


async def test_the_run_image_is_stored_and_its_jobs_carry_it(tmp_path: Path) -> None:
    """The run's image survives the store (migration of the runs table), and the jobs of a
    task without an image of its own carry it (the worker runs them in it)."""
    new = _plan(tmp_path, "env:2", None)
    store = await RunStore.open(tmp_path / "simrun.db")
    try:
        await store.create_run(new)
        run = await store.run("r1")
        assert run is not None
        assert run.image == "env:2"
        task = next(t for t in await store.tasks("r1") if t.name == "summary")
    finally:
        await store.close()
    (job,) = build_jobs(
        tmp_path, task, TYPES["report"], RESOLVED, "image:env_2", [range(1)], run_image=run.image
    )
    assert job.spec.image == "env:2"


def test_a_new_environment_image_is_not_reused_from_a_run_in_another(tmp_path: Path) -> None:
    """A task's fingerprint holds the image it runs in: the same workflow in another
    environment image does not reuse the earlier run's outputs; in the same one it does;
    a run without one keeps the fingerprint it always had."""

    def prints(image: str | None, default: str | None = None) -> dict[str, str | None]:
        return {t.name: t.fingerprint for t in _plan(tmp_path, image, default).tasks}

    assert prints("env:2") == prints("env:2") == prints(None, "env:2")
    assert prints("env:2")["sweep"] != prints("env:3")["sweep"]
    assert prints("env:2")["sweep"] != prints(None)["sweep"]
