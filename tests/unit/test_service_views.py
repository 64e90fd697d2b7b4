"""What the API shows of a run (simrun.service.views) and how a report is judged killed for
memory (simrun.service.controller.is_oom)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simrun.core.clock import ManualClock
from simrun.core.eta import ObservedRate
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.states import TaskCounts, UnitRow
from simrun.runstore.rows import RunRow, TaskRow
from simrun.service.controller import is_oom
from simrun.service.queries import ProgressSamples
from simrun.service.views import failure_view, run_view, task_view

RUN = RunRow("r1", "demo", "plate", "running", "", "doc", 1.0, 2.0, None)


def task(name: str, state: str, units: int | None, spu: float | None, queue: str = "cpu"):
    resources = None if spu is None and units is None else {"seconds_per_unit": spu}
    return TaskRow(
        run="r1", name=name, position=0, type="heat", settings={}, inputs={}, depends=(),
        override=None, memory_override_gb=None, splittable=True, has_merge=True,
        state=state, status="", queue=queue, resource_key="heat/plate",  # type: ignore[arg-type]
        resources=resources, units=units, started_s=None, finished_s=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("row", "counts", "processes", "eta"),
    [
        (task("a", "running", 100, 0.5), TaskCounts(pending=60, queued=20, done=20), 4, 10.0),
        (task("a", "running", 100, None), TaskCounts(pending=100), 4, None),  # nothing learned
        (task("a", "running", 100, 0.5), TaskCounts(pending=100), 0, None),  # no worker
        (task("a", "waiting", None, None), None, 4, None),  # not counted yet
        (task("a", "done", 10, 0.5), TaskCounts(done=10, merge="done"), 4, 0.0),
        (task("a", "merging", 10, 0.5), TaskCounts(done=10, merge="queued"), 4, 0.0),
    ],
)
def test_task_eta(row, counts, processes, eta):
    """A task's ETA is its unfinished units x learned seconds per unit / live processes of
    its queue; unknown without either, 0 once nothing is left."""
    view = task_view(row, counts, processes)
    assert view.eta_s == eta
    if counts is not None:
        assert sum(view.counts.values()) == counts.total


def test_run_eta_is_over_its_tasks_and_is_unknown_if_one_is():
    """A running run's ETA is over its unfinished tasks' ETAs (`simrun.core.eta.run_eta_s`),
    each with its queue's processes: independent tasks on two queues run side by side, a
    task after its input one after the other; one unknown ETA makes the run's unknown."""
    tasks = [task("a", "running", 100, 0.5), task("b", "running", 10, 2.0, queue="gpu")]
    counts = {"a": TaskCounts(pending=40), "b": TaskCounts(pending=10)}
    view = run_view(RUN, tasks, counts, {"cpu": 4, "gpu": 1})
    assert [t.eta_s for t in view.tasks] == [5.0, 20.0]
    assert view.eta_s == 20.0
    chained = [tasks[0], replace(tasks[1], depends=("a",))]
    assert run_view(RUN, chained, counts, {"cpu": 4, "gpu": 1}).eta_s == 25.0
    assert run_view(RUN, tasks, counts, {"cpu": 4}).eta_s is None
    assert view.to_dict()["tasks"][0]["counts"]["pending"] == 40
    ended = replace(RUN, state="succeeded")
    assert run_view(ended, tasks, counts, {"cpu": 4}).eta_s == 0.0


@pytest.mark.parametrize(
    ("spu", "processes", "observed", "eta", "rate"),
    [
        # 400 units left at an observed 100 units/s, fully trusted: 4 s, whatever is learned
        (1e-5, 2, ObservedRate(100.0, 1000, 10.0, 10), 4.0, 100.0),
        # nothing learned: the observed rate alone, however little was observed
        (None, 2, ObservedRate(100.0, 1, 0.5, 1), 4.0, 100.0),
        # no live process (Redis away): the observed rate alone
        (0.5, 0, ObservedRate(100.0, 1000, 10.0, 10), 4.0, 100.0),
        # half trusted (4 of 8 units seen): halfway between 4 s and the learned 100 s
        (0.5, 2, ObservedRate(100.0, 4, 10.0, 10), 52.0, 100.0),
        # nothing observed yet: the learned speed
        (0.5, 2, None, 100.0, None),
    ],
)
def test_task_eta_follows_the_observed_rate(spu, processes, observed, eta, rate):
    """A task's ETA is its remaining units / its observed completion rate, blended with the
    learned speed while few units were observed; the view shows the observed rate."""
    view = task_view(
        task("a", "running", 1000, spu), TaskCounts(pending=400, done=600), processes, observed
    )
    assert view.eta_s == pytest.approx(eta)
    assert view.units_per_s == rate
    run = run_view(
        RUN,
        [task("a", "running", 1000, spu)],
        {"a": TaskCounts(pending=400, done=600)},
        {"cpu": processes},
        {"a": observed} if observed else None,
    )
    assert run.eta_s == pytest.approx(eta)


def test_failure_view_keeps_the_traceback():
    """A failure shows the unit's key, its counts and its last traceback."""
    unit = UnitRow("r1", "sweep", -1, "merge", "failed", 3, errors=3, error="Traceback: x")
    view = failure_view(unit)
    assert (view.task, view.unit, view.errors, view.error) == ("sweep", "merge", 3, "Traceback: x")


def entry(outcomes: dict, killed: bool) -> ReportEntry:
    return ReportEntry(
        job_id="r:t:0:1", run="r", task="t", kind="chunk", attempt=1, worker_id="w",
        outcomes=outcomes, report=WorkerReport(
            peak_memory_gb=(0.3,), seconds_per_unit=None, units=0, limit_gb=0.25,
            killed_for_memory=killed,
        ),
        started=0.0, finished=1.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (entry({0: "done", 1: "killed", 2: "not_run"}, True), True),
        (entry({0: "killed"}, False), True),  # a unit said killed
        (entry({0: "done", 1: "failed"}, False), False),
        (entry({0: "timeout"}, False), False),  # a timeout is not a lack of memory
        (
            WorkerReport(
                peak_memory_gb=(0.3,),
                seconds_per_unit=None,
                units=0,
                limit_gb=0.25,
                killed_for_memory=True,
            ),
            True,
        ),
        (
            WorkerReport(
                peak_memory_gb=(0.3,),
                seconds_per_unit=0.1,
                units=1,
                limit_gb=0.25,
                killed_for_memory=False,
            ),
            False,
        ),
    ],
)
def test_is_oom(report, expected):
    """A report counts as killed for memory when the worker says its process was killed
    past its limit, or a unit's outcome is killed; errors and timeouts do not."""
    assert is_oom(report) is expected


def test_task_view_tells_times_kind_kills_and_memory():
    """A task's view carries what the store keeps on its row: when it started and ended,
    whether it splits, its kills for memory, and the memory per process it requested and
    peaked at; a task that never ran tells none of them."""
    ran = replace(
        task("a", "done", 10, 0.5),
        splittable=False,
        started_s=10.0,
        finished_s=25.0,
        kills=2,
        requested_gb=3.0,
        peak_memory_gb=1.25,
    )
    view = task_view(ran, TaskCounts(done=1), 4)
    assert (view.splittable, view.started_s, view.finished_s) == (False, 10.0, 25.0)
    assert (view.kills, view.requested_gb, view.peak_memory_gb) == (2, 3.0, 1.25)
    shown = run_view(RUN, [ran], {}, {}).to_dict()["tasks"][0]
    assert {k: shown[k] for k in ("kills", "requested_gb", "peak_memory_gb", "started_s")} == {
        "kills": 2, "requested_gb": 3.0, "peak_memory_gb": 1.25, "started_s": 10.0
    }  # fmt: skip
    fresh = task_view(task("b", "waiting", None, None), None, 4)
    assert (fresh.splittable, fresh.started_s, fresh.kills, fresh.peak_memory_gb) == (
        True, None, 0, None
    )  # fmt: skip


def test_progress_samples_keep_running_runs_only():
    """The read side samples the finished units (done or failed) of each running run's
    tasks on its clock; a run that is not running is forgotten, and at most ``max_runs``
    runs are kept (the least recently viewed go first)."""
    clock = ManualClock(now_s=1000.0)
    samples = ProgressSamples(clock, max_runs=2)
    assert samples.observe("r1", True, {"a": TaskCounts(pending=10)}) == {}
    clock.advance(1.0)
    samples.observe("r1", True, {"a": TaskCounts(pending=8, done=1, failed=1)})
    clock.advance(1.0)
    rates = samples.observe("r1", True, {"a": TaskCounts(pending=4, done=5, failed=1)})
    assert rates["a"].units_per_s == 4.0
    samples.observe("r2", True, {})
    samples.observe("r3", True, {})
    assert len(samples) == 2
    assert samples.observe("r1", True, {"a": TaskCounts(pending=2, done=8)}) == {}  # forgotten
    assert samples.observe("r3", False, {}) == {}
    assert len(samples) == 1


def test_progress_samples_leave_out_the_units_a_task_reused():
    """Units a task took from an earlier run (reuse per unit) were never computed: they
    count for no rate, even when the task's first sample came before it started."""
    clock = ManualClock(now_s=1000.0)
    samples = ProgressSamples(clock)
    samples.observe("r1", True, {"a": TaskCounts(pending=10)})
    clock.advance(1.0)
    samples.observe("r1", True, {"a": TaskCounts(pending=90, done=10)}, {"a": 10})
    clock.advance(1.0)
    samples.observe("r1", True, {"a": TaskCounts(pending=88, done=12)}, {"a": 10})
    clock.advance(1.0)
    rates = samples.observe("r1", True, {"a": TaskCounts(pending=86, done=14)}, {"a": 10})
    assert rates["a"].units_per_s == 2.0


@pytest.mark.parametrize(
    ("state", "held", "shown"),
    [("running", True, "interrupted"), ("running", False, "running"), ("failed", True, "failed")],
)
def test_a_held_running_run_is_shown_interrupted(state, held, shown):
    """A run left alone by the service that reads it (`RunStore.held`) is `INTERRUPTED`
    while it is running in the store; an ended one shows its own state."""
    assert run_view(replace(RUN, state=state), [], {}, {}, held=held).state == shown


def test_a_task_view_shows_its_phase():
    """The dispatch phase is a field of the task's view, not a prefix of its status."""
    from simrun.core.states import TaskPhase

    probing = replace(task("a", "running", 10, 1.0), phase=TaskPhase.PROBING)
    assert task_view(probing, None, 1).phase == "probing"
    assert task_view(task("a", "running", 10, 1.0), None, 1).phase == ""
