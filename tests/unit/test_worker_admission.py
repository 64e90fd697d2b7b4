"""Memory-weighted admission as pure decisions: which requests run now, wait or are
refused, and in which order waiters are served."""

from __future__ import annotations

import asyncio

import pytest

from simrun.worker.admission import (
    AdmissionClosed,
    AdmissionGate,
    Refused,
    Request,
    Usage,
    Waiter,
    assign_gpus,
    decide,
    pick,
)
from simrun.worker.capacity import Capacity

CAP = Capacity(memory_gb=8.0, processes=4, gpu_ids=("g0", "g1"))


@pytest.mark.parametrize(
    ("usage", "request_", "verdict", "reason"),
    [
        (Usage(), Request(2.0), "admit", ""),
        (Usage(6.0, 1), Request(2.0), "admit", ""),  # exactly fills the memory
        (Usage(0.1 + 0.2, 1), Request(7.7), "admit", ""),  # float slack
        (Usage(6.5, 1), Request(2.0), "wait", "2 GiB needed, 1.5 GiB free"),
        (Usage(1.0, 4), Request(1.0), "wait", "no free process"),
        (Usage(1.0, 1, 2), Request(1.0, gpus=1), "wait", "no free GPU"),
        (Usage(7.0, 4), Request(2.0), "wait", "2 GiB needed, 1 GiB free; no free process"),
        (Usage(), Request(8.5, what="a chunk"), "refuse", "a chunk needs 8.5 GiB of memory"),
        (Usage(), Request(1.0, slots=5), "refuse", "needs 5 processes and this worker has 4"),
        (Usage(), Request(1.0, gpus=3), "refuse", "needs 3 GPU(s) and this worker has 2"),
        (Usage(), Request(0.0), "admit", ""),  # a request of no memory needs a slot only
    ],
)
def test_decide(usage: Usage, request_: Request, verdict: str, reason: str) -> None:
    """A request runs when memory, a slot and GPUs are free; waits when something is taken;
    is refused when it exceeds the whole container, with a reason saying what is short."""
    decision = decide(CAP, usage, request_)
    assert decision.verdict == verdict
    assert reason in decision.reason


@pytest.mark.parametrize(
    ("usage", "waiting", "admitted", "refused"),
    [
        # Both fit: both start.
        (Usage(), [Waiter(Request(3.0), 0), Waiter(Request(3.0), 0)], [0, 1], []),
        # The second would overflow memory once the first is counted.
        (Usage(), [Waiter(Request(5.0), 0), Waiter(Request(5.0), 0)], [0], []),
        # A small job passes a big one that waited less than its patience...
        (Usage(4.0, 1), [Waiter(Request(6.0), 1.0), Waiter(Request(2.0), 0)], [1], []),
        # ... but not one that waited longer: the big one's memory is being freed for it.
        (Usage(4.0, 1), [Waiter(Request(6.0), 9.0), Waiter(Request(2.0), 0)], [], []),
        # A request that can never fit is refused, not left in the way.
        (Usage(), [Waiter(Request(99.0), 9.0), Waiter(Request(1.0), 0)], [1], [0]),
        # Slots bound it too: four slots, five one-slot jobs.
        (Usage(), [Waiter(Request(0.5), 0)] * 5, [0, 1, 2, 3], []),
    ],
)
def test_pick(usage: Usage, waiting: list[Waiter], admitted: list[int], refused: list[int]) -> None:
    """Waiters are admitted in order while they fit; one that waited its patience stops
    those behind it from passing."""
    assert pick(CAP, usage, waiting, patience_s=5.0) == (admitted, refused)


@pytest.mark.parametrize(
    ("in_use", "count", "expected"),
    [(set(), 1, ("g0",)), ({"g0"}, 1, ("g1",)), (set(), 2, ("g0", "g1")), (set(), 0, ())],
)
def test_assign_gpus(in_use: set[str], count: int, expected: tuple[str, ...]) -> None:
    """GPUs are handed out from the free ids in order."""
    assert assign_gpus(CAP.gpu_ids, in_use, count) == expected


async def test_gate_admits_on_release_and_refuses_and_closes() -> None:
    """The gate holds a request until memory is released, refuses one that can never fit at
    once, hands out distinct GPUs, and fails waiters when closed."""
    gate = AdmissionGate(CAP)
    first = await gate.acquire(Request(5.0, gpus=1))
    second = asyncio.ensure_future(gate.acquire(Request(5.0, gpus=1)))
    await asyncio.sleep(0)
    assert not second.done()
    assert gate.free_memory_gb == 3.0
    with pytest.raises(Refused, match="needs 20 GiB"):
        await gate.acquire(Request(20.0))
    gate.release(first)
    grant = await asyncio.wait_for(second, 1)
    assert grant.gpu_ids == ("g0",)  # g0 was given back by the first
    third = asyncio.ensure_future(gate.acquire(Request(5.0)))
    await asyncio.sleep(0)
    gate.close()
    with pytest.raises(AdmissionClosed):
        await third
    with pytest.raises(AdmissionClosed):
        await gate.acquire(Request(0.1))
    gate.release(grant)
    gate.release(grant)  # twice is harmless
    assert gate.usage == Usage()
