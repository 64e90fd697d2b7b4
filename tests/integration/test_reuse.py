"""Reuse of unchanged work across the runs of a store (`simrun.core.reuse`), on a real
controller, SQLite and Redis, stepped by the test with no worker: what a submission records,
which tasks a later run takes from an earlier one (and how their outputs arrive), which
it runs, and what the dry run reads from the file."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from simrun.app.plans import reuse_forecasts, store_resolver, task_plans
from simrun.app.prepare import prepare
from simrun.core.layout import StoreLayout
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.reuse import source_hash
from simrun.core.states import Limits, UnitState
from simrun.runstore.reads import done_in_file, done_ranges_in_file
from simrun.runstore.rows import TaskRow
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


# -- reuse per unit ------------------------------------------------------------------------


#: The states of a unit not done yet (no worker runs: dispatched units stay queued).
UNDONE: list[UnitState] = ["pending", "queued"]


def parts(units: int, seconds: float = 0.0) -> str:
    """A workflow of one ``svc-parts`` task (its units declared per index)."""
    task = {"name": "mc", "type": "svc-parts", "settings": {"units": units, "seconds": seconds}}
    return json.dumps({"tasks": [task]})


async def started(c: Controller, run_id: str) -> TaskRow:
    """The task ``mc`` of ``run_id`` once the controller started it (steps taken)."""
    for _ in range(20):
        await c.step()
        (task,) = await c.store.tasks(run_id)
        if task.state != "waiting":
            return task
    raise AssertionError(f"task mc of {run_id} did not start")


async def computed(c: Controller, run_id: str) -> None:
    """Make task ``mc`` of ``run_id`` done with its unit files, as workers would have."""
    (task,) = await c.store.tasks(run_id)
    out = StoreLayout(c.settings.store).task_out(run_id, "mc")
    out.mkdir(parents=True, exist_ok=True)
    for i in range(task.units or 0):  # atomically, as the spec asks: a linked file is kept
        tmp = out / f".unit-{i}.tmp"
        tmp.write_text(json.dumps({"run": run_id, "index": i}))
        tmp.replace(out / f"unit-{i}.json")
    (out / "merged.json").write_text("[]")
    await c.store.set_task(run_id, "mc", state="done", now_s=time.time())
    await c.store.set_run_state(run_id, "succeeded", "", time.time())


async def test_more_units_take_the_units_an_earlier_run_computed(controller: Controller) -> None:
    """A run with more units than a done one of the same unit fingerprint takes the units
    both have (their files hard-linked, done as spans, shown as reused) and runs only the
    others; the merge's output is not taken (the merge runs again)."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    await computed(controller, first)
    second = await submit(controller, parts(6))
    task = await started(controller, second)
    assert (task.state, task.reused_from) == ("running", None)
    assert (task.units_reused, task.units_reused_from) == (4, first)
    counts = (await controller.store.counts(second))["mc"]
    assert (counts.done, counts.pending + counts.queued) == (4, 2)
    assert [u.index for u in await controller.store.units(second, "mc", UNDONE)] == [4, 5]
    layout = StoreLayout(controller.settings.store)
    old, new = layout.task_out(first, "mc"), layout.task_out(second, "mc")
    for i in range(4):
        assert (new / f"unit-{i}.json").stat().st_ino == (old / f"unit-{i}.json").stat().st_ino
    assert not (new / "merged.json").exists()
    assert not (new / "unit-4.json").exists()
    done = await controller.store.units(second, "mc", ["done"])
    assert [u.index for u in done] == [0, 1, 2, 3]
    assert {u.job_id for u in done} == {f"reused:{first}"}


async def test_a_unit_whose_file_is_gone_runs_again(controller: Controller) -> None:
    """Only the units whose declared files are all still there are taken: a gap becomes a
    pending unit below the frontier, dispatched like any unit sent back."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    await computed(controller, first)
    (StoreLayout(controller.settings.store).task_out(first, "mc") / "unit-1.json").unlink()
    second = await submit(controller, parts(6))
    task = await started(controller, second)
    assert task.units_reused == 3
    undone = await controller.store.units(second, "mc", UNDONE)
    assert [u.index for u in undone] == [1, 4, 5]


async def test_fewer_units_take_them_all_and_merge_again(controller: Controller) -> None:
    """A run with fewer units takes every one and goes straight to its merge."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    await computed(controller, first)
    second = await submit(controller, parts(2))
    task = await started(controller, second)
    await controller.step()
    (task,) = await controller.store.tasks(second)
    assert task.units_reused == 2
    assert task.state == "merging"
    assert [u.kind for u in await controller.store.units(second, "mc", UNDONE)] == ["merge"]


async def test_another_setting_or_no_reuse_takes_no_unit(controller: Controller) -> None:
    """A setting other than the count changes the unit fingerprint: nothing is taken; nor
    with --no-reuse; the same workflow is reused whole, not per unit."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    await computed(controller, first)
    other = await started(controller, await submit(controller, parts(6, seconds=0.5)))
    assert other.units_reused == 0
    forced = await started(controller, await submit(controller, parts(6), reuse=False))
    assert forced.units_reused == 0
    whole = await started(controller, await submit(controller, parts(4)))
    assert (whole.state, whole.reused_from, whole.units_reused) == ("done", first, 0)


async def test_a_rerun_of_a_task_that_reused_units_runs_them_all(controller: Controller) -> None:
    """Running a task again (replay --all) forgets what it reused: every unit runs."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    await computed(controller, first)
    second = await submit(controller, parts(6))
    await started(controller, second)
    jobs = [j.id for j in await controller.store.jobs(second)]
    await controller.store.release_jobs(jobs, "the test takes them back")
    await computed(controller, second)
    await controller.rerun(second, "mc")
    task = await started(controller, second)
    assert (task.state, task.units_reused, task.reuse) == ("running", 0, False)
    assert len(await controller.store.units(second, "mc", UNDONE)) == 6


async def test_an_earlier_run_whose_files_are_gone_gives_way_to_the_one_before(
    controller: Controller,
) -> None:
    """The latest earlier task of the unit fingerprint is tried first; when none of its
    unit files are left (its run deleted by hand), the one before gives its units."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    await computed(controller, first)
    second = await submit(controller, parts(5))
    await started(controller, second)
    jobs = [j.id for j in await controller.store.jobs(second)]
    await controller.store.release_jobs(jobs, "the test takes them back")
    await computed(controller, second)
    layout = StoreLayout(controller.settings.store)
    shutil.rmtree(layout.task_out(second, "mc"))
    third = await started(controller, await submit(controller, parts(6)))
    assert (third.units_reused, third.units_reused_from) == (4, first)


async def test_the_done_units_of_a_cancelled_run_are_taken(
    controller: Controller, tmp_path: Path
) -> None:
    """A cancelled (or failed) task gives the units done in it: of the 4 units of a run
    cancelled after its first (the probe of a new key) was done, a new run of 6 takes that
    one (not the others, whose files are there too), and the dry run's reading of the file
    finds the same: the dry run plans the 5 others."""
    first = await submit(controller, parts(4))
    await started(controller, first)
    (job,) = await controller.store.jobs(first)  # the probe: unit 0 alone
    assert (job.first_idx, job.last_idx) == (0, 0)
    report = ReportEntry(
        job_id=job.id,
        run=first,
        task="mc",
        kind="chunk",
        attempt=job.attempt,
        worker_id="w1",
        outcomes={0: "done"},
        report=WorkerReport(peak_memory_gb=(0.1,), seconds_per_unit=0.1, units=1, limit_gb=1.0),
        started=time.time(),
        finished=time.time(),
    )
    async with controller.store.transaction() as conn:
        await controller.store.apply_reports(
            [report], conn=conn, limits=Limits(), now_s=time.time()
        )
    out = StoreLayout(controller.settings.store).task_out(first, "mc")
    out.mkdir(parents=True, exist_ok=True)
    for i in range(4):
        (out / f"unit-{i}.json").write_text("{}")
    await controller.cancel(first)
    (row,) = await controller.store.tasks(first)
    assert row.state == "cancelled"
    assert await controller.store.done_ranges(first, "mc") == [range(0, 1)]
    db_file = StoreLayout(controller.settings.store).db
    assert await done_ranges_in_file(db_file, first, "mc") == [range(0, 1)]
    wf = tmp_path / "wf.json"
    wf.write_text(parts(6))
    prepared = prepare(wf, controller.types)
    store = controller.settings.store
    forecast = await reuse_forecasts(prepared, controller.types, store)
    assert forecast.whole == {}
    rows = await task_plans(
        prepared.doc, controller.types, store_resolver(store), units_from=forecast.units
    )
    (row,) = rows
    assert (row.units_reused, row.units_from, row.note) == (1, first, f"1 unit reused from {first}")
    assert row.plan is not None
    assert row.plan.units == 5
    second = await started(controller, await submit(controller, parts(6)))
    assert (second.units_reused, second.units_reused_from) == (1, first)
