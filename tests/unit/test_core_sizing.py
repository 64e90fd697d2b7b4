"""The sizing rules the service and the workers share (simrun.core.sizing), on tables of
cases: queue choice, what a job asks of a worker, chunk sizes, retry memory, "fits no
worker", the probe of a key with no history."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.core.sizing import (
    PROBE_MAX_UNITS,
    JobShape,
    WorkerCapacity,
    chunk_size,
    fit_problem,
    is_probing,
    probe_status,
    probe_units,
    queue_name,
    request_gb,
    request_gpus,
    request_slots,
    retry_memory_gb,
    scratch_fits,
    split,
    split_range,
)
from simrun.resources import RETRY_FACTOR


@pytest.mark.parametrize(
    ("spu", "pending", "processes", "expected"),
    [
        (None, 20_000, 2, 1),  # nothing learned: one unit per job
        (0.5, 20_000, 2, 2),  # about a second of work
        (0.001, 20_000, 2, 1000),  # capped at max_chunk
        (0.0, 20_000, 2, 1000),  # free units: as big as allowed
        (0.001, 24, 4, 6),  # a small task still spreads over the processes
        (2.0, 100, 2, 1),  # a unit longer than the target: one per job
        (0.01, 1, 2, 1),
        (0.01, 0, 2, 1),
        (0.01, 50, 0, 50),  # no worker known yet: spread over one
    ],
)
def test_chunk_size(spu, pending, processes, expected):
    """Chunks hold about target_s of work, one unit until something is learned, never
    more than spreads the pending units over the processes, at most max_chunk."""
    assert chunk_size(spu, pending, processes, target_s=1.0, max_chunk=1000) == expected


def test_split_keeps_order_and_every_item():
    """Splitting keeps every item once, in order, in chunks of the size asked."""
    assert split([1, 2, 3, 4, 5], 2) == [(1, 2), (3, 4), (5,)]
    assert split([], 3) == []
    with pytest.raises(ValueError, match="chunk size"):
        split([1], 0)


@pytest.mark.parametrize(
    ("items", "size", "pending", "processes", "sizes"),
    [
        # a slice that ends before the task does: even chunks, as without pending
        (100, 10, 400, 2, [10] * 10),
        # the task's last units: full chunks, then at most left / (2 x processes) each,
        # at least size / 8 (rounded up)
        (100, 10, 100, 2, [10] * 7 + [8, 6, 4, 3, 3, 2, 2, 2]),
        (400, 10, 400, 2, [10] * 37 + [8, 6, 4, 3, 3, 2, 2, 2]),
        (20, 10, 20, 2, [5, 4, 3, 2, 2, 2, 2]),
        (
            10_000,
            1000,
            10_000,
            2,
            [1000] * 7 + [750, 563, 422, 317, 237, 178, 134, 125, 125, 125, 24],
        ),
        # more processes taper sooner
        (64, 8, 64, 4, [8, 7, 7, 6, 5, 4, 4, 3, 3, 3, 2, 2, 2] + [1] * 8),
        # one unit per job stays so
        (5, 1, 5, 2, [1, 1, 1, 1, 1]),
        (3, 10, 3, 2, [2, 1]),  # the floor: 10 / 8 rounded up
    ],
)
def test_split_tapers_the_tail_of_a_task(items, size, pending, processes, sizes):
    """The last units of a task go out in shrinking chunks (at most the units left over
    TAPER_SHARE x processes, at least size / TAPER_FLOOR, never more than size) so the
    processes end together; a slice that ends before the task does is cut evenly. Every
    item is kept once, in order."""
    chunks = split(list(range(items)), size, pending=pending, processes=processes)
    assert [len(c) for c in chunks] == sizes
    assert [i for c in chunks for i in c] == list(range(items))


@pytest.mark.parametrize(
    ("image", "gpus", "queue"),
    [
        (None, 0, "cpu"),
        (None, 1, "gpu"),
        ("solver", 0, "image:solver"),
        ("solver", 2, "image:solver"),
    ],
)
def test_queue_name(image, gpus, queue):
    """A task goes to its image's queue, else gpu with GPUs, else cpu."""
    assert queue_name(image, gpus) == queue


@pytest.mark.parametrize(
    ("kind", "uses_cores", "expected"),
    [
        ("chunk", False, 4.0),
        ("merge", False, 1.0),
        ("command", False, 5.0),
        ("command", True, 17.0),
    ],
)
def test_request_gb(kind, uses_cores, expected):
    """A job asks what the worker's admission counts: a chunk one process, a merge its base,
    a command base plus one process or all of them."""
    assert request_gb(kind, 1.0, 4.0, 4, uses_cores) == expected


CPU16 = WorkerCapacity("a", ("cpu",), 16.0, 4, 0)
CPU8 = WorkerCapacity("b", ("cpu",), 8.0, 2, 0)
GPU = WorkerCapacity("g", ("gpu",), 32.0, 2, 1)


SCRATCH_SMALL = WorkerCapacity("s", ("cpu",), 16.0, 4, 0, scratch_gb=10.0)
SCRATCH_BIG = WorkerCapacity("t", ("cpu",), 8.0, 2, 0, scratch_gb=100.0)
SCRATCH_UNTOLD = WorkerCapacity("u", ("cpu",), 16.0, 4, 0)


@pytest.mark.parametrize(
    ("per_worker", "scratch", "workers", "expected"),
    [
        (4.0, 0.0, [SCRATCH_SMALL], None),  # no scratch asked
        (4.0, 10.0, [SCRATCH_SMALL], None),  # exactly what is free
        (4.0, 50.0, [SCRATCH_SMALL, SCRATCH_BIG], None),  # the big disk fits
        (
            4.0,
            500.0,
            [SCRATCH_SMALL, SCRATCH_BIG],
            "needs 500 GiB of local scratch; the cpu worker with the most has 100 GiB free",
        ),
        # the one with the scratch lacks the memory: memory is the reason, among those
        (12.0, 50.0, [SCRATCH_SMALL, SCRATCH_BIG], "needs 12 GiB per process; the largest "
         "cpu worker has 8 GiB"),
        (4.0, 500.0, [SCRATCH_UNTOLD], None),  # an older worker that does not say: fits
    ],
)  # fmt: skip
def test_fit_problem_scratch(per_worker, scratch, workers, expected):
    """A task whose scratch_gb no live worker of its queue has free is named with the most
    free scratch of a worker; memory is judged among the workers with the scratch; a worker
    that does not tell its free scratch is taken as having enough."""
    found = fit_problem(JobShape("chunk", "cpu", 1.0, per_worker, 0, False, scratch), workers)
    assert found == expected


@pytest.mark.parametrize(
    ("need", "free", "fits"),
    [(0.0, None, True), (0.0, 0.0, True), (5.0, None, True), (5.0, 4.0, False), (5.0, 5.0, True)],
)
def test_scratch_fits(need, free, fits):
    """Scratch fits when none is asked, when the worker does not say, or when enough is
    free."""
    assert scratch_fits(need, free) is fits


@pytest.mark.parametrize(
    ("kind", "queue", "per_worker", "gpus", "workers", "expected"),
    [
        ("chunk", "cpu", 4.0, 0, [CPU16, CPU8], None),
        ("chunk", "cpu", 12.0, 0, [CPU16, CPU8], None),  # the big one fits
        (
            "chunk",
            "cpu",
            40.0,
            0,
            [CPU16, CPU8],
            "needs 40 GiB per process; the largest cpu worker has 16 GiB",
        ),
        ("chunk", "cpu", 40.0, 0, [], None),  # no worker yet: wait in the queue
        ("chunk", "cpu", 40.0, 0, [GPU], None),  # none serves cpu yet
        ("chunk", "gpu", 4.0, 1, [GPU], None),
        ("chunk", "gpu", 4.0, 2, [GPU], "needs 2 GPU(s); the gpu worker with the most has 1"),
        ("merge", "gpu", 4.0, 2, [GPU], None),  # a merge needs no GPU
        (
            "command",
            "cpu",
            15.5,
            0,
            [CPU16],
            "needs 16.5 GiB for its command; the largest cpu worker has 16 GiB",
        ),
    ],
)
def test_fit_problem(kind, queue, per_worker, gpus, workers, expected):
    """A request no live worker of its queue can ever fit is named with the largest worker;
    without a worker of the queue nothing is decided yet."""
    assert fit_problem(JobShape(kind, queue, 1.0, per_worker, gpus, False), workers) == expected


@pytest.mark.parametrize(
    ("base", "kills", "limit", "expected"),
    [
        (2.0, 0, 1.0, 2.0),
        (2.0, 1, 2.0, 2.0 * RETRY_FACTOR),
        (8.0, 1, 2.0, 8.0),
        (2.0, 1, None, 2.0),
    ],
)
def test_retry_memory(base, kills, limit, expected):
    """A unit (or merge) killed for memory gets at least RETRY_FACTOR times the limit of its
    last attempt, and never less than what is resolved for its key."""
    assert retry_memory_gb(base, kills, limit, retry_factor=RETRY_FACTOR) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kind", "uses_cores", "slots", "gpus"),
    [
        ("chunk", False, 1, 2),
        ("chunk", True, 1, 2),  # uses_cores only widens a command
        ("merge", False, 1, 0),  # a merge needs no GPU
        ("command", False, 1, 2),
        ("command", True, 4, 2),  # every slot of the container
    ],
)
def test_request_slots_and_gpus(kind, uses_cores, slots, gpus):
    """A job takes one process slot, all of them for a command that uses the cores, and the
    task's GPUs except for a merge."""
    assert request_slots(kind, 4, uses_cores) == slots
    assert request_gpus(kind, 2) == gpus


@given(
    n=st.integers(0, 3000),
    size=st.integers(1, 1200),
    pending=st.one_of(st.none(), st.integers(0, 4000)),
    processes=st.integers(1, 16),
    start=st.integers(0, 10**6),
)
def test_split_range_cuts_as_split_does(
    n: int, size: int, pending: int | None, processes: int, start: int
) -> None:
    """Fresh units cut as a range (no list of indices) land in the same chunks as the same
    indices cut as a list, tapered tail included."""
    indices = range(start, start + n)
    ranged = split_range(indices, size, pending=pending, processes=processes)
    listed = split(list(indices), size, pending=pending, processes=processes)
    assert [tuple(r) for r in ranged] == listed
    assert all(isinstance(r, range) and r.step == 1 for r in ranged)


HOUR = 3600.0


@pytest.mark.parametrize(
    ("units", "processes", "spu", "expected"),
    [
        (1, 4, None, 0),  # one unit: nothing to hold back
        (2, 1, None, 0),  # two units: never (the rest would wait a whole unit)
        (2, 1, 10.0, 0),  # ... even when fast
        (2, 2, 3 * HOUR, 0),  # a 3-hour key with 2 units: not worth it
        (3, 0, None, 0),  # 3 waves of unknown length: the wait could be a third of it
        (4, 0, None, 1),  # no worker live yet: counted as one process, 4 waves
        (40, 2, None, 2),  # one unit per process
        (1000, 2, None, 2),
        (1000, 100, None, PROBE_MAX_UNITS),  # one per process, capped
        (20, 10, None, 0),  # 2 waves of unknown length
        (20, 10, 10.0, 8),  # ... but a 10-second key is worth it
        (20, 10, 600.0, 8),  # a wait of at most PROBE_MAX_WAIT_S
        (20, 10, 600.5, 0),  # ... and no longer
        (20, 10, 3 * HOUR, 0),  # a 3-hour key with 2 units per process
        (40, 10, 3 * HOUR, 8),  # ... with 4 per process: the wait is at most a quarter
        (39, 10, 3 * HOUR, 0),
        (5, 10, 10.0, 2),  # at most half the task
        (3, 10, 10.0, 1),
    ],
)
def test_probe_units(units, processes, spu, expected):
    """A task of a key with no history probes when it has at least PROBE_MIN_UNITS units
    and either PROBE_MIN_WAVES units per process or units known to last at most
    PROBE_MAX_WAIT_S; the probe is one unit per process (one while no worker is live), at
    most PROBE_MAX_UNITS and at most half the task."""
    assert probe_units(units, processes, spu) == expected


@given(
    st.integers(0, 10_000),
    st.integers(0, 500),
    st.none() | st.floats(0, 1e6, allow_nan=False),
)
def test_probe_units_bounds(units, processes, spu):
    """A probe is never most of the task, never more than one unit per process (one while
    none is live) nor more than PROBE_MAX_UNITS; tasks of 1 or 2 units never probe."""
    n = probe_units(units, processes, spu)
    assert n >= 0
    if units <= 2:
        assert n == 0
    if n:
        assert n <= min(PROBE_MAX_UNITS, max(1, processes), units // 2)


def test_probe_status_is_recognised():
    """The status of a probing task names the probe and the units that wait, and is told
    apart from any other status."""
    assert probe_status(1, 23) == "probing: 1 unit first, the other 23 wait for their memory"
    assert probe_status(2, 998) == "probing: 2 units first, the other 998 wait for their memory"
    assert is_probing(probe_status(2, 998))
    assert not is_probing("")
    assert not is_probing("needs 40 GiB per process; the largest cpu worker has 16 GiB")
