"""Pure bookkeeping of the worker: unit outcomes and their report, what a job asks of
admission, and which worker process a job gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.plugins import TaskPaths
from simrun.worker.capacity import Capacity
from simrun.worker.jobs import request_for
from simrun.worker.ledger import Ledger, death_outcome
from simrun.worker.pool.processes import RECYCLE_KEPT_GB, Candidate, choose, describe_exit


def test_ledger_reports_completed_units_only() -> None:
    """Seconds per unit is the mean over completed units; units counts them; the units
    nobody got to are handed back."""
    ledger = Ledger([3, 4, 5, 6])
    ledger.record(3, "done", seconds=1.0)
    ledger.record(4, "failed", seconds=9.0, error="Traceback")
    ledger.record(5, "done", seconds=2.0)
    ledger.close_rest()
    assert ledger.outcomes == {3: "done", 4: "failed", 5: "done", 6: "not_run"}
    assert ledger.errors == {4: "Traceback"}
    report = ledger.report((0.5,), 1.0, False)
    assert (report.units, report.seconds_per_unit, report.peak_memory_gb) == (2, 1.5, (0.5,))


def test_ledger_without_completed_units_and_misuse() -> None:
    """No completed unit means no seconds per unit; a unit gets one outcome, once, and only
    units of the job can get one."""
    ledger = Ledger(["merge"])
    ledger.record("merge", "killed", error="memory")
    assert ledger.report((2.0,), 1.0, True).seconds_per_unit is None
    with pytest.raises(ValueError, match="already ended as 'killed'"):
        ledger.record("merge", "done")
    with pytest.raises(KeyError, match="not part of this job"):
        ledger.record(7, "done")
    with pytest.raises(ValueError, match="listed twice"):
        Ledger([1, 1])


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [("memory", "killed"), ("timeout", "timeout"), ("stop", "not_run"), (None, "failed")],
)
def test_death_outcome(reason: str | None, outcome: str) -> None:
    """The unit under a dead process is killed, timed out, handed back or failed, by who
    killed the process (nobody: it crashed)."""
    assert death_outcome(reason) == outcome


@pytest.mark.parametrize(
    ("code", "text"), [(3, "exit code 3"), (-11, "killed by signal SIGSEGV"), (None, "still")]
)
def test_describe_exit(code: int | None, text: str) -> None:
    """Return codes read as exit codes or signal names."""
    assert text in describe_exit(code)


def _job(kind: str, **changes: Any) -> JobSpec:
    paths = JobPaths.of(TaskPaths.for_task(Path("/s"), "r", "t"))
    fields: dict[str, Any] = {
        "kind": kind,
        "run": "r",
        "task": "t",
        "task_type": "x",
        "settings": {},
        "paths": paths,
        "resources": JobResources(memory_base_gb=1.0, memory_per_worker_gb=2.0, gpus=1),
        "indices": (0,) if kind == "chunk" else (),
        "command": "run {out}" if kind == "command" else None,
    }
    fields.update(changes)
    return JobSpec(**fields)


@pytest.mark.parametrize(
    ("job", "memory", "slots", "gpus"),
    [
        (_job("chunk"), 2.0, 1, 1),
        (_job("merge"), 1.0, 1, 0),
        (_job("command"), 3.0, 1, 1),
        (_job("command", uses_cores=True), 1.0 + 2.0 * 4, 4, 1),
    ],
)
def test_request_for(job: JobSpec, memory: float, slots: int, gpus: int) -> None:
    """A chunk asks for its per-worker memory, a merge for its base memory (no GPU), a
    command for base + per-worker memory per slot it takes (all of them with uses_cores);
    the memory asked for is also the job's limit."""
    request, limit = request_for(job, Capacity(16.0, 4, ("g0",)))
    assert (request.memory_gb, request.slots, request.gpus, limit) == (memory, slots, gpus, memory)


KEY = ("run", "task")
OTHER = ("run", "other")


BASE = 0.0186  # an idle interpreter's baseline (GiB)
LIGHT = BASE + 0.05 / 1024  # what a light task leaves
HEAVY = BASE + 50 / 1024  # a setup's state kept


@pytest.mark.parametrize(
    ("idle", "gpu_ids", "expected"),
    [
        # The process whose last job was of the task wins, whatever it keeps.
        (
            [Candidate((), OTHER, LIGHT, BASE), Candidate((), KEY, HEAVY, BASE)],
            (),
            (1, False),
        ),
        # Else one that can switch as it is, one set up for the task first ...
        (
            [
                Candidate((), OTHER, BASE, BASE),
                Candidate((), OTHER, LIGHT, BASE, frozenset({KEY, OTHER})),
            ],
            (),
            (1, False),
        ),
        # ... then the one keeping the least; a heavy one is passed over ...
        (
            [
                Candidate((), OTHER, HEAVY, BASE, frozenset({KEY, OTHER})),
                Candidate((), OTHER, LIGHT, BASE),
                Candidate((), OTHER, BASE, BASE),
            ],
            (),
            (2, False),
        ),
        # ... and started afresh when all are: what it keeps would count in the new peak.
        ([Candidate((), OTHER, HEAVY, BASE)], (), (0, True)),
        ([Candidate((), OTHER, BASE + RECYCLE_KEPT_GB * 1.01, BASE)], (), (0, True)),
        ([Candidate((), OTHER, BASE + RECYCLE_KEPT_GB * 0.99, BASE)], (), (0, False)),
        # Set up for the task but last on another that kept much: started afresh too.
        ([Candidate((), OTHER, HEAVY, BASE, frozenset({KEY, OTHER}))], (), (0, True)),
        # A fresh process (no task yet) is never restarted for its memory.
        ([Candidate((), None, 5.0)], (), (0, False)),
        # A GPU job needs a process started with its GPU ...
        (
            [Candidate((), KEY, LIGHT, BASE), Candidate(("g1",), OTHER, LIGHT, BASE)],
            ("g1",),
            (1, False),
        ),
        # ... and restarts one when none has it; so does a CPU job among GPU processes.
        ([Candidate(("g0",), KEY, LIGHT, BASE)], ("g1",), (0, True)),
        ([Candidate(("g0",), KEY, LIGHT, BASE)], (), (0, True)),
        # The interpreter's own memory (its baseline) is not a leftover: of two processes,
        # the one keeping the least beyond its baseline is chosen, not the smaller one.
        (
            [Candidate((), OTHER, 0.30, 0.02), Candidate((), OTHER, 0.30, 0.298)],
            (),
            (1, False),
        ),
    ],
)
def test_choose(
    idle: list[Candidate],
    gpu_ids: tuple[str, ...],
    expected: tuple[int, bool],
) -> None:
    """Which idle worker process a job gets, and whether it is started afresh first: a
    process switching task keeps at most RECYCLE_KEPT_GB of what other tasks left."""
    assert choose(idle, gpu_ids, KEY) == expected
