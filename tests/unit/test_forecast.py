"""The forecast of the dry run and the Editor (simrun.core.forecast), on tables of cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simrun.app.plans import resolved_from_summary
from simrun.cli import remote
from simrun.client import ClientError
from simrun.core.forecast import (
    UNTOLD_GPUS,
    TaskPlan,
    forecast,
    forecast_document,
    forecast_task,
    live_pool,
    pool_advice,
    pool_of,
    pool_text,
    slots_for,
)
from simrun.core.scaling import parse_backlog
from simrun.core.sizing import WorkerCapacity
from simrun.plugins import ResourceHint
from simrun.workflow import ResourceOverride


def plan(**fields: object) -> TaskPlan:
    base: dict[str, object] = {
        "name": "sweep",
        "type": "heat",
        "kind": "chunk",
        "units": 100,
        "queue": "cpu",
        "memory_base_gb": 0.5,
        "memory_per_worker_gb": 1.0,
        "gpus": 0,
        "seconds_per_unit": 2.0,
        "source": "plugin hint",
    }
    base.update(fields)
    return TaskPlan(**base)  # type: ignore[arg-type]  # the table's values are the right types


def worker(memory_gb: float, processes: int, gpus: int = 0, queues=("cpu", "gpu")):
    return WorkerCapacity("w", tuple(queues), memory_gb, processes, gpus)


@pytest.mark.parametrize(
    ("task", "pool", "slots"),
    [
        (plan(), [worker(16, 4)], 4),  # processes bound it
        (plan(memory_per_worker_gb=6.0), [worker(16, 4)], 2),  # memory bounds it
        (plan(memory_per_worker_gb=0.1), [worker(0.3, 8)], 3),  # 3 x 0.1 fits 0.3 exactly
        (plan(), [worker(16, 4), worker(2, 4)], 6),  # summed over the workers
        (plan(queue="gpu", gpus=1), [worker(64, 8, gpus=2)], 2),  # GPUs bound it
        (plan(queue="gpu", gpus=1), [worker(64, 8, queues=("cpu",))], 0),  # no gpu worker
        (plan(memory_per_worker_gb=0.0), [worker(1, 3)], 3),  # free units: all processes
        (plan(kind="command", units=1), [worker(16, 4)], 1),  # a command runs once
        (plan(kind="command", units=1, memory_base_gb=20.0), [worker(16, 4)], 0),
    ],
)
def test_slots_for(task, pool, slots):
    """Units run at once: per worker of the task's queue, the processes whose memory and
    GPUs fit; a command has one slot when some worker fits it."""
    assert slots_for(task, pool) == slots


@pytest.mark.parametrize(
    ("task", "pool", "expected"),
    [
        # 100 units of 2 s on 4 slots: 25 waves of 2 s, 200 s of work = 0.0556 core-hours.
        (plan(), [worker(16, 4)], (4, 200 / 3600, 4.0, 50.0, None)),
        # 10 units on 4 slots: 3 waves.
        (plan(units=10), [worker(16, 4)], (4, 20 / 3600, 4.0, 6.0, None)),
        # 2 units: only 2 processes busy, so the peak is 2 GiB.
        (plan(units=2), [worker(16, 4)], (4, 4 / 3600, 2.0, 2.0, None)),
        # Nothing learned: no core-hours, no ETA, but the peak is known.
        (plan(seconds_per_unit=None), [worker(16, 4)], (4, None, 4.0, None, None)),
        # Units unknown (not countable here): the peak counts every slot.
        (plan(units=None), [worker(16, 4)], (4, None, 4.0, None, None)),
        # No unit at all: done at once.
        (plan(units=0), [worker(16, 4)], (4, 0.0, 0.5, 0.0, None)),
        # The base memory is the floor of the peak (the merge needs it).
        (plan(units=1, memory_base_gb=3.0), [worker(16, 4)], (4, 2 / 3600, 3.0, 2.0, None)),
        # A command that uses the cores takes base + all processes of the worker.
        (
            plan(kind="command", units=1, uses_cores=True, seconds_per_unit=60.0),
            [worker(16, 4)],
            (1, 240 / 3600, 4.5, 60.0, None),
        ),
        (
            plan(kind="command", units=1, seconds_per_unit=60.0),
            [worker(16, 4)],
            (1, 60 / 3600, 1.5, 60.0, None),
        ),
    ],
)
def test_forecast_task(task, pool, expected):
    """Core-hours = units x seconds per unit; ETA = waves of the slots x seconds per unit;
    peak = processes busy at once x memory per process, at least the base."""
    result = forecast_task(task, pool)
    slots, hours, peak, eta, problem = expected
    assert result.slots == slots
    assert result.core_hours == (None if hours is None else pytest.approx(hours))
    assert result.peak_memory_gb == pytest.approx(peak)
    assert result.eta_s == (None if eta is None else pytest.approx(eta))
    assert result.problem == problem


@pytest.mark.parametrize(
    ("task", "pool", "problem"),
    [
        (
            plan(memory_per_worker_gb=40.0),
            [worker(16, 4)],
            "needs 40 GiB per process; the largest cpu worker has 16 GiB",
        ),
        (plan(queue="image:solver"), [worker(16, 4)], "no worker of the pool serves"),
        (plan(queue="gpu", gpus=2), [worker(16, 4, gpus=1)], "needs 2 GPU(s)"),
    ],
)
def test_forecast_task_names_what_cannot_run(task, pool, problem):
    """A task the pool can never run has no slots, no ETA and a problem that says why."""
    result = forecast_task(task, pool)
    assert result.slots == 0
    assert result.eta_s is None
    assert result.problem is not None
    assert problem in result.problem


def test_forecast_sums_tasks_that_run_one_after_the_other():
    """The run's ETA and core-hours are the sums of its tasks' when they run one after the
    other (along the graph, or on one queue); its peak the largest."""
    pool = pool_of(1, 4, 16.0)
    result = forecast(
        [plan(units=8), plan(name="report", kind="command", units=1, seconds_per_unit=3.0)], pool
    )
    assert result.eta_s == pytest.approx(4.0 + 3.0)
    assert result.core_hours == pytest.approx((16 + 3) / 3600)
    assert result.peak_memory_gb == pytest.approx(4.0)


def test_forecast_eta_of_tasks_side_by_side_on_two_queues_is_the_longer():
    """Independent tasks on two queues run side by side: the run's ETA is the longer one's
    (`simrun.core.eta.run_eta_s`, the rule of a running run's ETA); one after the other
    when one reads the other's outputs."""
    pool = pool_of(1, 4, 16.0, gpus=1)
    cpu = plan(units=8)  # 2 waves of 2 s
    gpu = plan(name="fit", queue="gpu", gpus=1, units=1, seconds_per_unit=3.0)
    assert forecast([cpu, gpu], pool).eta_s == pytest.approx(4.0)
    chained = forecast([cpu, replace(gpu, depends=("sweep",))], pool)
    assert chained.eta_s == pytest.approx(4.0 + 3.0)


def test_forecast_is_unknown_while_a_task_is():
    """One task without learned seconds makes the run's ETA and core-hours unknown."""
    result = forecast([plan(), plan(name="b", seconds_per_unit=None)], pool_of(1, 4, 16.0))
    assert result.eta_s is None
    assert result.core_hours is None
    assert result.peak_memory_gb == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("summary", "hint", "override", "expected"),
    [
        # Nothing learned: the hint, and where it came from.
        (None, ResourceHint(1.0, 2.0), None, (1.0, 2.0, None, "plugin hint")),
        (None, ResourceHint(), None, (2.0, 6.0, None, "default")),
        # Learned: the service's request and speed.
        (
            {
                "requested_gb": 0.75,
                "seconds_per_unit": 0.5,
                "source": "learned from 3 runs",
                "samples": 40,
            },
            ResourceHint(1.0, 2.0),
            None,
            (1.0, 0.75, 0.5, "learned from 3 runs"),
        ),
        # The workflow's override wins over what is learned.
        (
            {"requested_gb": 0.75, "seconds_per_unit": 0.5, "source": "learned from 3 runs"},
            ResourceHint(1.0, 2.0),
            ResourceOverride(memory_per_worker_gb=8.0, memory_base_gb=4.0),
            (4.0, 8.0, 0.5, "override"),
        ),
    ],
)
def test_resolved_from_summary(summary, hint, override, expected):
    """What a service would resolve, from its /resources row, the hint and the override."""
    got = resolved_from_summary(summary, hint, override)
    assert (got.memory_base_gb, got.memory_per_worker_gb, got.seconds_per_unit, got.source) == (
        expected
    )


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ((1, 2, 18.04), "1 worker container x 2 processes, 18 GiB each"),
        ((3, 8, 0.5), "3 worker containers x 8 processes, 512 MiB each"),
    ],
)
def test_pool_text(args, text):
    """The pool in words."""
    assert pool_text(*args) == text


def _queue(queue: str, workers: int, shape: dict[str, object] | None) -> dict[str, object]:
    return {"queue": queue, "units": 0, "entries": [], "workers": workers, "shape": shape}


def _backlog(*queues: dict[str, object]) -> dict[str, object]:
    return {"queues": list(queues), "default_shape": {"memory_gb": 8.0, "processes": 4}}


@pytest.mark.parametrize(
    ("queues", "pool"),
    [
        ((), []),
        ((_queue("cpu", 2, {"memory_gb": 8.0, "processes": 4}),), [("cpu", 8.0, 4, 0)] * 2),
        ((_queue("gpu", 1, {"memory_gb": 32.0, "processes": 2}),), [("gpu", 32.0, 2, UNTOLD_GPUS)]),
        ((_queue("image:x", 0, None),), []),  # no live worker, no shape: none
        ((_queue("cpu", 0, {"memory_gb": 8.0, "processes": 4}),), []),
    ],
)
def test_live_pool_from_a_services_backlog(queues, pool):
    """The pool of GET /backlog (read by `parse_backlog`, as `simrun scale` reads it): per
    queue with live workers, that many containers of its shape; gpu workers are not GPU-bound."""
    found = live_pool(parse_backlog(_backlog(*queues)))
    assert [(w.queues[0], w.memory_gb, w.processes, w.gpus) for w in found] == pool


def test_slots_on_a_services_live_pool():
    """The dry run's slots on the live pool: the processes of the task's queue's workers."""
    pool = live_pool(
        parse_backlog(
            _backlog(
                _queue("cpu", 2, {"memory_gb": 8.0, "processes": 4}),
                _queue("gpu", 1, {"memory_gb": 32.0, "processes": 2}),
            )
        )
    )
    assert slots_for(plan(), pool) == 8
    assert slots_for(plan(queue="gpu", gpus=1), pool) == 2


class _Client:
    def __init__(self, answer: object) -> None:
        self.answer = answer

    def backlog(self) -> object:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        (_backlog(), "no live worker"),
        (
            _backlog(_queue("cpu", 2, {"memory_gb": 16.0, "processes": 4})),
            "live: cpu: 2 worker containers x 4 processes, 16 GiB each",
        ),
        (ClientError("404 not found"), "unknown: the service does not tell its workers"),
        # an answer that is not a backlog is not a crash of the dry run
        (
            {"queues": [{"queue": "cpu", "workers": 1}]},
            "unknown: the service does not tell its workers",
        ),
        ({"queues": "none"}, "unknown: the service does not tell its workers"),
    ],
)
def test_the_dry_run_s_live_pool_in_words(answer, text):
    """`simrun submit --dry-run`'s pool: the live workers the backlog answer tells of."""
    assert remote._live_pool(_Client(answer))[1] == text  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scratch", "room", "problem"),
    [
        (0.0, 10.0, None),
        (5.0, 10.0, None),
        (5.0, None, None),  # the room is not known: not judged here
        (50.0, 10.0, "needs 50 GiB of local scratch; the cpu worker with the most has 10 GiB free"),
    ],
)
def test_forecast_names_a_task_no_workers_scratch_holds(scratch, room, problem):
    """A task asking more local scratch than the pool's workers have room for cannot run,
    and the advice is about scratch, not memory."""
    result = forecast_task(plan(scratch_gb=scratch), pool_of(2, 4, 16.0, scratch_gb=room))
    assert result.problem == problem
    if problem is not None:
        assert "scratch_gb" in pool_advice(problem)
        assert "--worker-memory-gb" not in pool_advice(problem)
    assert "--worker-memory-gb" in pool_advice("needs 40 GiB per process; the largest ...")


CPU4 = WorkerCapacity("cpu4", ("cpu",), memory_gb=8.0, processes=4, gpus=0)
SMALL = WorkerCapacity("small", ("cpu",), memory_gb=2.0, processes=4, gpus=0)
GPU = WorkerCapacity("gpu", ("gpu",), memory_gb=32.0, processes=4, gpus=2)
COMMAND = {"kind": "command", "units": 1}


@pytest.mark.parametrize(
    ("task", "pool", "slots"),
    [
        (plan(), [CPU4], 4),
        (plan(), [CPU4, SMALL], 6),  # memory leaves 2 of SMALL's processes
        (plan(memory_per_worker_gb=16.0), [CPU4], 0),
        (plan(queue="gpu", gpus=1), [GPU, CPU4], 2),
        (plan(**COMMAND), [CPU4], 1),
        (plan(**COMMAND, memory_base_gb=8.0), [CPU4], 0),
        # a command that uses the cores asks for every process of the container
        (plan(**COMMAND, memory_base_gb=0.5, memory_per_worker_gb=2.0), [CPU4], 1),
        (plan(**COMMAND, memory_base_gb=0.5, memory_per_worker_gb=2.0, uses_cores=True), [CPU4], 0),
        (plan(), [], 0),
    ],
)
def test_slots_on_the_live_pool(task, pool, slots):
    """Units run at once: per worker of the task's queue, its processes that memory (and
    GPUs) allow; a command runs once where its whole memory fits (every process's worth
    for one that uses the cores): the Editor's forecast follows the dry run's rule."""
    assert slots_for(task, pool) == slots
    assert forecast_task(task, pool).slots == slots


def test_the_editor_s_forecast_on_the_live_pool():
    """The Editor's table: core-hours are units x seconds per unit; the ETA is in waves of
    the slots; a task no worker serves says so; the run's ETA is unknown while a task's is."""
    found = forecast_document(forecast([plan()], [CPU4]), [CPU4])
    (task,) = found["tasks"]
    assert task["core_hours"] == pytest.approx(100 * 2.0 / 3600)
    assert task["eta_s"] == pytest.approx(25 * 2.0)
    assert task["problem"] is None
    assert found["eta_s"] == pytest.approx(50.0)
    assert found["pool"] == {"workers": 1, "processes": 4, "memory_gb": 8.0}
    none = forecast_document(forecast([plan(seconds_per_unit=None)], []), [])
    assert none["tasks"][0]["problem"] == "no worker of the pool serves the cpu queue"
    assert none["eta_s"] is None
    assert none["core_hours"] is None


def test_the_editor_and_the_dry_run_forecast_a_command_that_uses_the_cores_alike():
    """One forecast: a command that uses the cores costs the core-hours of every process of
    its worker, and a task the pool cannot fit says why in the dry run's words, in the
    Editor's table as in the dry run's."""
    command = plan(**COMMAND, memory_base_gb=0.5, memory_per_worker_gb=1.0, uses_cores=True)
    too_big = plan(name="big", memory_per_worker_gb=64.0)
    result = forecast([command, too_big], [CPU4])
    document = forecast_document(result, [CPU4])
    cores, big = document["tasks"]
    assert cores["core_hours"] == pytest.approx(2.0 * 4 / 3600) == result.tasks[0].core_hours
    assert big["problem"] == result.tasks[1].problem
    assert big["problem"] is not None
    assert "64 GiB" in big["problem"]


async def test_a_failing_count_is_refused_naming_the_task_and_its_settings() -> None:
    """The plans of the dry run and the Editor refuse a task whose ``count_units`` raises
    with one problem that names the task, its settings field and what the plugin raised."""
    from simrun.app.plans import summaries_resolver, task_plans
    from simrun.workflow import WorkflowError, parse_workflow
    from tests.support.odd_counts import ODD

    doc = parse_workflow(
        "tasks:\n"
        "  - {name: fine, type: svc-odd-count}\n"
        "  - {name: odd, type: svc-odd-count, settings: {answer: raise}}\n"
    )
    with pytest.raises(WorkflowError) as refused:
        await task_plans(doc, {ODD.name: ODD}, summaries_resolver(()))
    [problem] = refused.value.problems
    assert problem.where() == "task 'odd', settings"
    assert problem.message == "count_units failed: RuntimeError: the model file is unreadable"
