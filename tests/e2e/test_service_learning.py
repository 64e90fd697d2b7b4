"""Memory learned across runs, end to end: units killed for memory are retried with more,
and the next run of the same key starts from what the first one measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.resources import RETRY_FACTOR, ResourceKey
from tests.support.service_harness import service, work_doc, workers
from tests.support.service_tasks import WORK
from tests.support.units import calls

pytestmark = pytest.mark.e2e

HINT_GB = WORK.hint.memory_per_worker_gb  # what the first run asks for


async def test_killed_units_retry_with_more_and_the_next_run_learns(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Units that need more than the hint are killed for memory, dispatched again with at
    least RETRY_FACTOR times the killed limit, and succeed; a second run of the same key
    asks from the start for the learned memory, and nothing of it is killed. (Without a
    probe, which would spare all but its own units the kill: the rule checked is the retry
    of every unit; tests/integration/test_dispatch_probe.py checks a killed probe.)"""
    store = tmp_path / "store"
    doc = work_doc(units=4, hog_mb=300, tag="hog")
    with workers(redis_url, redis_prefix, store=store, memory_gb=3.0, processes=2):
        async with service(store, redis_url, redis_prefix, probe=False) as svc:
            first = await svc.submit(doc)
            run1 = await svc.wait(first, timeout_s=90)
            units1 = await svc.controller.store.units(first, "work")
            key = ResourceKey("svc-work", "", "hog")
            learned = await svc.controller.resources.resolve(key, WORK.hint, None)
            second = await svc.submit(doc, reuse=False)  # the same tasks: run them again
            run2 = await svc.wait(second, timeout_s=90)
            units2 = await svc.controller.store.units(second, "work")
            view2 = await svc.controller.queries.run(second)
    assert run1.state == "succeeded", run1.message
    chunks1 = [u for u in units1 if u.kind == "chunk"]
    assert all(u.kills >= 1 for u in chunks1), [(u.index, u.kills) for u in chunks1]
    assert all(u.memory_gb is not None for u in chunks1)
    assert min(u.memory_gb or 0.0 for u in chunks1) >= RETRY_FACTOR * HINT_GB - 1e-9
    out1 = store / "runs" / first / "work" / "out"
    assert all(n >= 2 for n in calls(out1).values())

    assert run2.state == "succeeded", run2.message
    assert learned.source.startswith("learned")
    assert learned.memory_per_worker_gb > HINT_GB
    chunks2 = [u for u in units2 if u.kind == "chunk"]
    assert {u.memory_gb for u in chunks2} == {learned.memory_per_worker_gb}
    assert all(u.kills == 0 for u in chunks2)
    assert calls(store / "runs" / second / "work" / "out") == dict.fromkeys(range(4), 1)
    assert view2 is not None
    assert view2.tasks[0].resources is not None
    assert view2.tasks[0].resources["source"].startswith("learned")
