"""How the controller starts tasks (issue 11, items 4 and 5): an absurd or broken
``count_units`` fails its task at once and holds up nothing else; a run of many small tasks
starts in batches, so a cancel gets in between. A real controller on real SQLite and Redis,
stepped by the test (no worker runs)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from simrun.core.intake import InputLimits
from simrun.plugins import load_types
from simrun.service.advance import START_TASKS_PER_STEP
from simrun.service.controller import Controller
from tests.support.service_harness import REFS, settings, submit
from tests.support.wait import until

pytestmark = pytest.mark.redis

TYPES = load_types([*REFS, "tests.support.odd_counts:ODD"])
LIMITS = InputLimits(
    max_units_per_task=1_000_000, max_units_per_run=1_500_000, count_timeout_s=0.5, max_tasks=1000
)


@pytest.fixture
async def controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    options = settings(tmp_path / "store", redis_url, redis_prefix, intake=LIMITS)
    ctl = await Controller.open(options, TYPES)
    try:
        yield ctl
    finally:
        await ctl.close()


def doc(*tasks: tuple[str, str, dict[str, object]]) -> str:
    return json.dumps({"tasks": [{"name": n, "type": t, "settings": s} for n, t, s in tasks]})


async def status_of(c: Controller, run_id: str) -> dict[str, tuple[str, str, int | None]]:
    return {t.name: (t.state, t.status, t.units) for t in await c.store.tasks(run_id)}


async def test_an_absurd_count_fails_its_task_at_once(controller: Controller) -> None:
    """count_units answering 10**9 fails its task in the first step with a message naming
    the type, the count and the limit (no unit row is made); another run of 2 units starts
    in that same step."""
    absurd = await submit(controller, doc(("big", "svc-work", {"units": 10**9})))
    small = await submit(controller, doc(("small", "svc-work", {"units": 2})))
    await controller.step()
    state, status, _ = (await status_of(controller, absurd))["big"]
    assert state == "failed"
    assert "count_units of type 'svc-work' returned 1000000000 units" in status
    assert "at most 1000000" in status
    assert "--max-units-per-task" in status
    assert await controller.store.counts(absurd) == {}
    assert (await status_of(controller, small))["small"] == ("running", "", 2)
    run = await controller.store.run(absurd)
    assert run is not None
    assert run.state == "failed"
    assert "big: count_units of type 'svc-work' returned 1000000000" in run.message


async def test_the_units_of_a_run_are_bounded(controller: Controller) -> None:
    """Tasks whose counts are each allowed but together pass max_units_per_run: the one
    that would pass it fails, naming the run's total and the limit."""
    run_id = await submit(
        controller,
        doc(("a", "svc-work", {"units": 1_000_000}), ("b", "svc-work", {"units": 600_000})),
    )
    await controller.step()
    found = await status_of(controller, run_id)
    assert found["a"][0] == "running"
    assert found["b"][0] == "failed"
    assert "would make 1600000 units in the run; a run may have at most 1500000" in found["b"][1]


ODD_CASES = {
    "raise": "count_units failed: RuntimeError: the model file is unreadable",
    "text": "returned str '12', not an integer",
    "float": "returned float 2.5, not an integer",
    "bool": "returned bool True, not an integer",
    "negative": "returned -3, a negative count",
}


@pytest.mark.parametrize(("answer", "message"), ODD_CASES.items(), ids=list(ODD_CASES))
async def test_a_broken_count_fails_its_task(
    controller: Controller, answer: str, message: str
) -> None:
    """A count_units that raises, or answers a string, a float, a bool or a negative
    number fails its task with a message saying what it answered."""
    run_id = await submit(controller, doc(("odd", "svc-odd-count", {"answer": answer})))
    await controller.step()
    state, status, _ = (await status_of(controller, run_id))["odd"]
    assert state == "failed"
    assert message in status


async def test_a_count_that_hangs_fails_its_task_and_holds_up_nothing(
    controller: Controller,
) -> None:
    """A count_units that never answers does not hold the controller: another run starts
    meanwhile, a cancel is answered, and after count_timeout_s the task fails saying so."""
    hung = await submit(controller, doc(("hang", "svc-odd-count", {"answer": "hang"})))
    await controller.step()
    other = await submit(controller, doc(("ok", "svc-odd-count", {"units": 3})))
    third = await submit(controller, doc(("ok", "svc-odd-count", {"units": 1})))
    await controller.step()
    assert (await status_of(controller, other))["ok"] == ("running", "", 3)
    await controller.cancel(third)
    assert (await status_of(controller, third))["ok"][0] == "cancelled"

    async def counted_out() -> bool:  # a step at a time
        if (await status_of(controller, hung))["hang"][0] != "waiting":
            return True
        await controller.step()
        return False

    await until(counted_out, timeout_s=10, what="the hung count to time out", poll_s=0)
    state, status, _ = (await status_of(controller, hung))["hang"]
    assert state == "failed"
    assert "count_units of type 'svc-odd-count' did not answer within 0.5 s" in status


async def test_many_small_tasks_start_in_batches(controller: Controller) -> None:
    """A run of 450 one-unit tasks starts at most START_TASKS_PER_STEP tasks a step (the
    lock is let go in between: a cancel comes in, and nothing starts after it)."""
    tasks = [(f"t{i}", "svc-work", {"units": 1}) for i in range(450)]
    run_id = await submit(controller, doc(*tasks))
    await controller.step()
    started = [
        n for n, (s, _, _) in (await status_of(controller, run_id)).items() if s != "waiting"
    ]
    assert len(started) == START_TASKS_PER_STEP
    await controller.cancel(run_id)
    await controller.step()
    states = {s for s, _, _ in (await status_of(controller, run_id)).values()}
    assert states == {"cancelled"}
