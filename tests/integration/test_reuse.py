"""Reuse of unchanged work across the runs of a store (`simrun.core.reuse`), on a real
controller, SQLite and Redis, stepped by the test with no worker: what a submission records,
which tasks a later run takes from an earlier one (and how their outputs arrive), which
it runs, and what the dry run reads from the file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from simrun.core.layout import StoreLayout
from simrun.core.reuse import source_hash
from simrun.runstore.reads import done_in_file
from simrun.service.controller import Controller
from simrun.workflow import check_workflow, parse_workflow
from tests.support.service_harness import REPO

pytestmark = pytest.mark.redis

HEAT = (REPO / "examples" / "heat.yaml").read_text()


async def submit(
    c: Controller, text: str = HEAT, *, reuse: bool = True, rerun: tuple[str, ...] = ()
) -> str:
    doc = parse_workflow(text)
    return await c.submit(
        doc,
        check_workflow(doc, c.types),
        text,
        base=REPO / "examples",
        reuse=reuse,
        rerun=rerun,
    )


async def finish(c: Controller, run_id: str) -> None:
    """Make every task of ``run_id`` done with an output file, as workers would have."""
    layout = StoreLayout(c.settings.store)
    for task in await c.store.tasks(run_id):
        out = layout.task_out(run_id, task.name)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.txt").write_text(f"{run_id} {task.name}\n")
        await c.store.set_task(run_id, task.name, state="done", now_s=time.time())
    await c.store.set_run_state(run_id, "succeeded", "", time.time())


async def states(c: Controller, run_id: str) -> dict[str, tuple[str, str | None]]:
    await c.step()
    await c.step()
    return {t.name: (t.state, t.reused_from) for t in await c.store.tasks(run_id)}


def retitled(title: str) -> str:
    return HEAT.replace("Heat sweep of a plate with a heater and a cooling pipe", title)


async def test_a_second_run_reuses_both_tasks_with_their_outputs(controller: Controller) -> None:
    """A run of the same workflow after a succeeded one takes both tasks from it without
    dispatching a unit: each is done, reused from the first run, its out directory holding
    the first run's files as hard links; the run succeeds."""
    first = await submit(controller)
    await finish(controller, first)
    second = await submit(controller)
    assert await states(controller, second) == {
        "sweep": ("done", first),
        "summary": ("done", first),
    }
    layout = StoreLayout(controller.settings.store)
    for task in ("sweep", "summary"):
        old, new = layout.task_out(first, task), layout.task_out(second, task)
        assert (new / "result.txt").read_text() == f"{first} {task}\n"
        assert (new / "result.txt").stat().st_ino == (old / "result.txt").stat().st_ino
    (row,) = [t for t in await controller.store.tasks(second) if t.name == "summary"]
    assert row.status == f"reused from {first}"
    assert await controller.store.jobs(second) == []
    run = await controller.store.run(second)
    assert run is not None
    assert run.state == "succeeded"


async def test_a_changed_setting_runs_that_task_and_what_depends_on_it(
    controller: Controller,
) -> None:
    """A new title for the summary runs the summary only; a changed sweep setting runs
    the sweep, and the summary waits for it."""
    first = await submit(controller)
    await finish(controller, first)
    titled = await submit(controller, retitled("Another title"))
    found = await states(controller, titled)
    assert found["sweep"] == ("done", first)
    assert found["summary"][0] in ("running", "blocked")
    assert found["summary"][1] is None
    swept = await submit(controller, HEAT.replace("duration: 0.25", "duration: 0.2"))
    found = await states(controller, swept)
    assert found["sweep"][0] in ("running", "blocked")
    assert found["summary"] == ("waiting", None)


async def test_no_reuse_and_rerun_force_work(controller: Controller) -> None:
    """--no-reuse runs every task; --rerun summary runs the summary only, --rerun sweep the
    sweep and (after it) the summary; each such task records it may not reuse."""
    first = await submit(controller)
    await finish(controller, first)
    none = await submit(controller, reuse=False)
    assert (await states(controller, none))["sweep"][1] is None
    assert not any(t.reuse for t in await controller.store.tasks(none))
    only = await submit(controller, rerun=("summary",))
    found = await states(controller, only)
    assert found["sweep"] == ("done", first)
    assert found["summary"][1] is None
    assert found["summary"][0] in ("running", "blocked")
    swept = await submit(controller, rerun=("sweep",))
    found = await states(controller, swept)
    assert found["sweep"][1] is None
    assert found["summary"] == ("waiting", None)


async def test_outputs_that_are_gone_are_not_reused(controller: Controller) -> None:
    """An earlier task whose out directory was deleted is not reused: the task runs."""
    first = await submit(controller)
    await finish(controller, first)
    layout = StoreLayout(controller.settings.store)
    (layout.task_out(first, "sweep") / "result.txt").unlink()
    layout.task_out(first, "sweep").rmdir()
    second = await submit(controller)
    found = await states(controller, second)
    assert found["sweep"][1] is None
    assert found["sweep"][0] in ("running", "blocked")


async def test_a_changed_source_runs_its_readers(controller: Controller, tmp_path: Path) -> None:
    """A source whose content changed (the same path) changes the fingerprint of the task
    that reads it; one whose content is the same, copied elsewhere, does not."""
    base = tmp_path / "wf"
    base.mkdir()
    plate = json.loads((REPO / "examples" / "plate.json").read_text())
    (base / "plate.json").write_text(json.dumps(plate))
    doc = parse_workflow(HEAT)

    async def sub() -> str:
        return await controller.submit(doc, check_workflow(doc, controller.types), HEAT, base=base)

    first = await sub()
    await finish(controller, first)
    same = await sub()
    assert (await states(controller, same))["sweep"] == ("done", first)
    plate["changed"] = True
    (base / "plate.json").write_text(json.dumps(plate))
    changed = await sub()
    assert (await states(controller, changed))["sweep"][1] is None
    assert source_hash(base / "plate.json") != source_hash(REPO / "examples" / "plate.json")


async def test_the_dry_run_reads_the_done_tasks_from_the_file(controller: Controller) -> None:
    """`done_in_file` finds the done tasks of a fingerprint, latest first, and nothing in a
    file that does not exist."""
    first = await submit(controller)
    await finish(controller, first)
    tasks = {t.name: t for t in await controller.store.tasks(first)}
    sweep = tasks["sweep"].fingerprint
    assert sweep is not None
    found = await done_in_file(StoreLayout(controller.settings.store).db, [sweep])
    assert [(d.run, d.task) for d in found] == [(first, "sweep")]
    assert await done_in_file(controller.settings.store / "nothing.db", [sweep]) == []
