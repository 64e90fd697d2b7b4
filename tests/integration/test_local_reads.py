"""What `simrun status --store` and embedded mode read from a store
(simrun.local.reads.StoreReader), on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.states import Limits
from simrun.local.reads import StoreReader
from simrun.resources import ResourceStore
from simrun.runstore.rows import NewJob, NewRun, NewTask
from simrun.runstore.store import RunStore


def report(job: str, outcomes: dict[int | str, str], peak: float) -> ReportEntry:
    return ReportEntry(
        job_id=job, run="r1", task="sweep", kind="chunk", attempt=1, worker_id="w1",
        outcomes=outcomes, report=WorkerReport(
            peak_memory_gb=(peak,), seconds_per_unit=0.1, units=1, limit_gb=2.0
        ), started=50.0,
        finished=51.0,
    )  # fmt: skip


async def test_the_store_view_tells_what_the_service_view_does_and_the_outputs(
    tmp_path: Path,
) -> None:
    """A run read from its store shows per task its kills, memory requested and at its
    peak, times and kind, as the store keeps them on the task, and where its outputs are
    under the store as the user named it."""
    store = await RunStore.open(tmp_path / "simrun.db")
    try:
        await store.create_run(
            NewRun(
                "r1", None, "plate", "doc",
                (NewTask("sweep", "heat", 0, {}, {}, (), True, False),
                 NewTask("summary", "report", 1, {}, {}, ("sweep",), False, False)),
                100.0,
            )
        )  # fmt: skip
        await store.start_task("r1", "sweep", 2, now_s=101.0)
        jobs = [NewJob(f"r1:sweep:{i}:1", "r1", "sweep", "chunk", "cpu", 1, (i,), 2.0)
                for i in (0, 1)]  # fmt: skip
        await store.add_jobs(jobs, now_s=102.0)
        async with store.transaction() as conn:
            await store.apply_reports(
                [report(jobs[0].id, {0: "done"}, 0.7), report(jobs[1].id, {1: "killed"}, 2.0)],
                conn=conn, limits=Limits(), now_s=103.0,
            )  # fmt: skip
        reader = StoreReader(store, ResourceStore(store.path, keep_open=False), Path("st"))
        view = await reader.run("r1")
        assert view is not None
        sweep, summary = view.tasks
        assert (sweep.kills, sweep.requested_gb, sweep.peak_memory_gb) == (1, 2.0, 0.7)
        assert (sweep.splittable, sweep.started_s, sweep.finished_s) == (
            True, 101.0, None
        )  # fmt: skip
        assert sweep.counts["done"] == 1
        assert sweep.out == str(Path("st") / "runs" / "r1" / "sweep" / "out")
        assert (summary.kills, summary.peak_memory_gb, summary.splittable) == (
            0, None, False
        )  # fmt: skip
        assert await reader.run("nope") is None
    finally:
        await store.close()
