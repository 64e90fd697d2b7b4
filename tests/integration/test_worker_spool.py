"""The reports a worker keeps while Redis is away (simrun.worker.spool.ReportSpool): in
order, past the memory bound in an fsync'd file, bounded, delivered exactly once each."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from simrun.core.reports import ReportEntry, RunningJob, WorkerReport
from simrun.worker.spool import ReportSpool, SpoolBounds
from tests.support.keys import TEST_KEY


def entry(n: int, error: str = "") -> ReportEntry:
    return ReportEntry(
        job_id=f"r1:sweep:{n}:1", run="r1", task="sweep", kind="chunk", attempt=1,
        worker_id="w1", outcomes={n: "done"}, errors={},
        report=WorkerReport(peak_memory_gb=(0.5,), seconds_per_unit=0.1, units=1, limit_gb=1.0),
        started=10.0 + n, finished=11.0 + n, error=error or None,
    )  # fmt: skip


def holding(n: int) -> RunningJob:
    return RunningJob.model_construct(
        job_id=f"r1:sweep:{n}:1", run="r1", task="sweep", kind="chunk", indices=(n,),
        attempt=1, state="running",
    )  # fmt: skip


class Sink:
    """A stand-in for Redis's XADD that fails the first ``fail`` writes."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.written: list[ReportEntry] = []

    async def __call__(self, e: ReportEntry) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("Redis away")
        self.written.append(e)


async def test_reports_past_memory_go_to_disk_and_come_back_in_order(tmp_path: Path) -> None:
    """Reports past the memory bound are written to the spool file (which holds them, one
    line each, before delivery), every report is delivered once and in the order kept, a
    failed write leaves the rest for the next delivery, and the file is removed once
    emptied."""
    path = tmp_path / "local" / "w1.spool.jsonl"
    one = len(json.dumps(entry(0).to_fields(TEST_KEY), separators=(",", ":"))) + 1  # a line's size
    spool = ReportSpool(path, TEST_KEY, SpoolBounds(memory_bytes=3 * one, disk_bytes=10**6))
    for n in range(8):
        assert spool.add(entry(n), holding(n))
    in_memory, on_disk = spool.sizes
    assert (in_memory, len(path.read_bytes().splitlines())) == (3 * one, 5)
    assert on_disk == len(path.read_bytes())
    assert [j.indices for j in spool.jobs()] == [(n,) for n in range(8)]
    flaky = Sink(fail=0)
    first = Sink(fail=1)
    with pytest.raises(ConnectionError):
        await spool.deliver(first)
    assert len(spool) == 8  # nothing forgotten that was not written
    partial = Sink()
    partial_calls = 0

    async def stop_after_five(e: ReportEntry) -> None:
        nonlocal partial_calls
        partial_calls += 1
        if partial_calls > 5:
            raise ConnectionError("Redis away again")
        await partial(e)

    with pytest.raises(ConnectionError):
        await spool.deliver(stop_after_five)
    assert len(spool) == 3
    assert spool.add(entry(8), holding(8))  # behind the ones still on disk
    assert await spool.deliver(flaky) == 4
    got = [e.job_id for e in partial.written + flaky.written]
    assert got == [f"r1:sweep:{n}:1" for n in range(9)]
    assert partial.written[0] == entry(0)
    assert (len(spool), spool.sizes, path.exists()) == (0, (0, 0), False)


async def test_a_full_spool_drops_with_one_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past both bounds a report is dropped and one error line says so (not one per
    report); after a delivery the spool takes reports again."""
    path = tmp_path / "w1.spool.jsonl"
    spool = ReportSpool(path, TEST_KEY, SpoolBounds(memory_bytes=0, disk_bytes=1))
    with caplog.at_level(logging.ERROR, logger="simrun.worker.spool"):
        assert not spool.add(entry(0), holding(0))
        assert not spool.add(entry(1), holding(1))
    assert spool.dropped == 2
    assert [r.getMessage() for r in caplog.records if "spool full" in r.getMessage()] != []
    assert len([r for r in caplog.records if "spool full" in r.getMessage()]) == 1
    assert await spool.deliver(Sink()) == 0
    roomy = ReportSpool(path, TEST_KEY, SpoolBounds(memory_bytes=10**6, disk_bytes=0))
    assert roomy.add(entry(2, error="x" * 100), holding(2))
