"""The arq job function of the worker container: one job in, one report out.

For every job, whatever happens, exactly one `ReportEntry` goes to the report stream, with
an outcome for each of its units; it is written here, by the job itself, never by arq hooks
(arq skips those on several paths). The steps:

1. read the payload (`JobSpec.from_dict`); a bad payload is logged and dropped;
2. skip the units whose current attempt in Redis is newer than the job's ("stale");
3. wait for admission (`simrun.worker.admission`): memory, a process slot, GPUs; a job
   that can never fit this container is "refused"; a job still waiting when the worker
   stops is handed back ("not_run");
4. run it: a chunk or a merge in a worker process of the pool, a command through
   simrun-exec; before each batch of units of a chunk (a fraction of a second of work,
   see `simrun.worker.pool.runner`) the attempts are looked at again (through a view at most
   `STALE_REFRESH_S` old);
5. keep the logs of its units in the run's directory (`simrun.core.unitlogs`): the output
   of a unit that printed something was written while it ran (`UnitLogSink`); a header
   (worker, process, attempt, outcome, traceback, memory, times) is written here for each
   unit that printed something or did not end well, and for a command's attempt; a unit
   that printed nothing and ended well gets no file;
6. add the report to the stream; while Redis is away, keep it in the spool
   (`simrun.worker.spool`) for the link (`simrun.worker.link`) to deliver, in order, once
   Redis is back. A report written twice (its XADD answered by a connection that broke)
   is harmless: the service applies a unit's ``done`` once, and other outcomes only for
   the unit's current attempt while it is in flight.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simrun.core.jobs import JobSpec
from simrun.core.layout import task_logs
from simrun.core.reports import ReportEntry, RunningJob, WorkerReport, now_s
from simrun.core.sizing import request_gb, request_gpus, request_slots
from simrun.core.unitlogs import FAILED, UnitLogHeader, attempt_paths, write_atomic
from simrun.core.wire import PayloadError, UnitKey
from simrun.queues.client import current_attempts
from simrun.queues.connect import cancel_and_wait
from simrun.queues.keys import Keys
from simrun.worker import gpumem
from simrun.worker.admission import AdmissionClosed, AdmissionGate, Grant, Refused, Request
from simrun.worker.capacity import Capacity
from simrun.worker.command import run_command
from simrun.worker.ledger import Ledger
from simrun.worker.link import LINK_ERRORS, RedisLink
from simrun.worker.pool.output import DEFAULT_COMMAND_LOG_CAP, UnitLogSink
from simrun.worker.pool.processes import PoolError, ProcessPool
from simrun.worker.pool.runner import run_chunk, run_merge
from simrun.worker.scratch import (
    GIB,
    ScratchSpace,
    Staged,
    scratch_admission,
    scratch_limit_gb,
)
from simrun.worker.spool import ReportSpool

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

#: How old the view of the current attempts may be when a unit is about to start.
STALE_REFRESH_S = 0.5
#: Seconds between two measurements of a task's local scratch while a job of it runs.
SCRATCH_SAMPLE_S = 1.0
#: The most headers of failed units without output one job writes (a setup that fails
#: fails every unit of its chunk with the same message: the first ones say it).
MAX_FAILED_HEADERS = 20


def write_unit_headers(
    spec: JobSpec,
    entry: ReportEntry,
    sink: UnitLogSink | None,
    pid: int | None,
    seconds: Mapping[UnitKey, float] | None = None,
) -> int:
    """Write the header of each unit of the job that printed something (``sink``) or did
    not end well (at most `MAX_FAILED_HEADERS` of those without output), and of a
    command's attempt (blocking: call it in a thread). Returns how many were written."""
    if sink is not None:
        sink.settle_orphan()  # the last output of a process that died, to its unit
    written = dict(sink.written) if sink is not None else {}
    logs = task_logs(Path(spec.paths.task_dir))
    failed_only = 0
    count = 0
    for unit, outcome in entry.outcomes.items():
        if unit == "command" and outcome not in FAILED | {"done"}:
            continue  # an attempt that never ran (stale, handed back)
        if unit not in written and outcome not in FAILED and unit != "command":
            continue
        if unit not in written and unit != "command":
            failed_only += 1
            if failed_only > MAX_FAILED_HEADERS:
                continue
        header = UnitLogHeader(
            run=spec.run,
            task=spec.task,
            unit=unit,
            attempt=spec.attempt,
            job_id=spec.job_id,
            worker=entry.worker_id,
            pid=pid,
            outcome=outcome,
            error=entry.errors.get(unit) or (entry.error if outcome in FAILED else None),
            seconds=(seconds or {}).get(unit),
            peak_gb=max(entry.report.peak_memory_gb, default=0.0),
            limit_gb=entry.report.limit_gb,
            started=entry.started,
            finished=entry.finished,
            output_bytes=written.get(unit, 0),
        )
        path = attempt_paths(logs, unit, spec.attempt)[0]
        write_atomic(path, json.dumps(header.to_dict(), indent=1).encode())
        count += 1
    return count


def request_for(spec: JobSpec, capacity: Capacity) -> tuple[Request, float]:
    """What a job asks of admission, and the memory limit (GiB) it runs under.

    A chunk asks for one process with ``memory_per_worker_gb`` (its limit); a merge for one
    process with ``memory_base_gb`` (its limit; no GPU); a command for
    ``memory_base_gb + memory_per_worker_gb * n`` (the limit of its whole process tree) and
    n slots, n being all of the container's slots when the type ``uses_cores``, else 1.
    """
    res = spec.resources
    what = f"a {spec.kind} job of task {spec.task!r} ({spec.task_type})"
    memory = request_gb(
        spec.kind, res.memory_base_gb, res.memory_per_worker_gb, capacity.processes, spec.uses_cores
    )
    slots = request_slots(spec.kind, capacity.processes, spec.uses_cores)
    return Request(memory, slots, request_gpus(spec.kind, res.gpus), what), memory


def _counts(entry: ReportEntry) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in entry.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def _log_entry(entry: ReportEntry) -> None:
    """One line per job: at debug level when every unit is done, else a warning."""
    counts = _counts(entry)
    summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    level = logging.DEBUG if set(counts) <= {"done", "stale"} else logging.WARNING
    note = f" ({entry.error.splitlines()[0]})" if entry.error else ""
    memory = " killed for memory" if entry.report.killed_for_memory else ""
    log.log(level, "job %s: %s%s%s", entry.job_id, summary, memory, note)


def _with_scratch(report: WorkerReport, staged: Staged, peak_gb: float) -> WorkerReport:
    """``report`` with what staging took and the peak of the task's local scratch."""
    return report.model_copy(
        update={"staged_bytes": staged.bytes, "staged_s": staged.seconds, "scratch_gb": peak_gb}
    )


class StaleView:
    """Which units of a job were dispatched again with a newer attempt.

    Refreshed from Redis when older than ``refresh_s``; when Redis cannot be asked (or
    the ``link`` knows it is away), units count as current (running one twice is
    harmless, outputs are deterministic)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        spec: JobSpec,
        refresh_s: float = STALE_REFRESH_S,
        link: RedisLink | None = None,
    ) -> None:
        self.redis, self.keys, self.spec, self.refresh_s = redis, keys, spec, refresh_s
        self.link = link
        self._current: dict[UnitKey, int] = {}
        self._at = -float("inf")

    async def refresh(self) -> None:
        self._at = time.monotonic()
        if self.link is not None and not self.link.is_up:
            return
        try:
            self._current = await current_attempts(
                self.redis, self.keys, self.spec.run, self.spec.task, self.spec.units
            )
        except LINK_ERRORS as exc:
            if self.link is not None:
                self.link.lost(exc)
            else:
                log.warning("cannot read the current attempts of %s: %s", self.spec.job_id, exc)
        self._at = time.monotonic()

    async def is_stale(self, unit: UnitKey) -> bool:
        if time.monotonic() - self._at > self.refresh_s:
            await self.refresh()
        return self._current.get(unit, self.spec.attempt) > self.spec.attempt


@dataclass
class JobHandler:
    """Runs jobs for one worker container; ``running`` is what its heartbeat shows."""

    redis: Redis
    keys: Keys
    worker_id: str
    capacity: Capacity
    gate: AdmissionGate
    pool: ProcessPool
    running: dict[str, RunningJob] = field(default_factory=dict)
    #: Set when the grace period of a stop is over: what is left is handed back.
    stop_now: bool = False
    #: The link to Redis and the reports kept while it is down (set by the container;
    #: without them a report that cannot be written raises).
    link: RedisLink | None = None
    spool: ReportSpool | None = None
    #: How commands are bounded: "auto" (a memory cgroup each where the kernel allows it)
    #: or "off" (their process tree), and the cap of each of their log files in bytes.
    command_cgroups: str = "auto"
    command_log_cap: int = DEFAULT_COMMAND_LOG_CAP
    #: The container engine that runs the commands of image jobs in their image (None: here).
    engine: str | None = None
    #: The local scratch of the tasks (None: the paths the service sent, as they are).
    scratch: ScratchSpace | None = None
    _commands: set[asyncio.Task[WorkerReport]] = field(default_factory=set)
    #: The sink of each job's unit logs and the pid of the process it ran in.
    _sinks: dict[str, tuple[UnitLogSink, int]] = field(default_factory=dict)

    async def handle(self, ctx: Mapping[str, Any], payload: object) -> dict[str, Any]:
        """The arq job function (registered as `simrun.queues.JOB_FUNCTION`)."""
        try:
            spec = JobSpec.from_dict(payload)
        except PayloadError as exc:
            log.error("dropped arq job %s: %s", ctx.get("job_id"), exc)
            return {"error": str(exc)}
        entry = await self.run(spec)
        return {"job_id": spec.job_id, "outcomes": _counts(entry)}

    async def run(self, spec: JobSpec) -> ReportEntry:
        """Run one job and report it; returns the entry written."""
        started = now_s()
        ledger = Ledger(spec.units)
        request, limit_gb = request_for(spec, self.capacity)
        report = WorkerReport.empty(limit_gb)
        error: str | None = None
        self.running[spec.job_id] = RunningJob.of(spec)
        holding = RunningJob.of(spec, "running")
        try:
            view = StaleView(self.redis, self.keys, spec, link=self.link)
            for unit in spec.units:
                if await view.is_stale(unit):
                    ledger.record(unit, "stale")
            if ledger.pending:
                report, error = await self._admitted(spec, ledger, request, limit_gb, view)
        except asyncio.CancelledError:
            ledger.close_rest("not_run", "the job was cancelled: the worker shut down")
            entry = self._entry(spec, ledger, report, started, "cancelled: handed back")
            await asyncio.shield(self._write(entry, holding))
            raise
        except Exception:  # a bug of the worker must still produce a report
            log.exception("job %s failed inside the worker", spec.job_id)
            error = f"the worker failed while running the job:\n{traceback.format_exc()}"
        finally:
            self.running.pop(spec.job_id, None)
        ledger.close_rest("not_run")
        entry = self._entry(spec, ledger, report, started, error)
        await self._unit_logs(spec, entry, ledger)
        await self._write(entry, holding)
        _log_entry(entry)
        return entry

    async def _admitted(
        self, spec: JobSpec, ledger: Ledger, request: Request, limit_gb: float, view: StaleView
    ) -> tuple[WorkerReport, str | None]:
        """Wait for admission and run; the report and a job-level error, if any."""
        empty = WorkerReport.empty(limit_gb)
        short = await self._scratch_short(spec)
        if short is not None:
            ledger.close_rest("refused")
            return empty, f"refused by worker {self.worker_id}: {short}"
        try:
            grant = await self.gate.acquire(request)
        except Refused as exc:
            ledger.close_rest("refused")
            return empty, f"refused by worker {self.worker_id}: {exc}"
        except AdmissionClosed:
            ledger.close_rest("not_run")
            return empty, "the worker stopped before the job was admitted; handed back"
        self.running[spec.job_id] = self.running[spec.job_id].admitted()
        try:
            if self.stop_now:
                return empty, "the worker stopped before the job started; handed back"
            if self.scratch is None:
                return await self._run(spec, ledger, grant, limit_gb, view), None
            return await self._in_scratch(self.scratch, spec, ledger, grant, limit_gb, view)
        except PoolError as exc:
            return empty, f"no worker process: {exc}"
        finally:
            self.gate.release(grant)

    async def _run(
        self, spec: JobSpec, ledger: Ledger, grant: Grant, limit_gb: float, view: StaleView
    ) -> WorkerReport:
        """`_execute`, measuring the memory of the job's GPUs when it was granted some."""
        if not grant.gpu_ids:
            return await self._execute(spec, ledger, grant, limit_gb, view)
        return await self._execute_on_gpus(spec, ledger, grant, limit_gb, view)

    async def _execute_on_gpus(
        self, spec: JobSpec, ledger: Ledger, grant: Grant, limit_gb: float, view: StaleView
    ) -> WorkerReport:
        """`_execute`, the memory of the granted GPUs measured (`simrun.worker.gpumem`) and
        reported next to the host memory."""
        report, gpu_gb = await gpumem.measure(
            grant.gpu_ids, self._execute(spec, ledger, grant, limit_gb, view)
        )
        host = ", ".join(f"{p:.3g}" for p in report.peak_memory_gb) or "-"
        gpu = "unknown (no answer from nvidia-smi)" if gpu_gb is None else f"{gpu_gb:.3g} GiB"
        log.info(
            "job %s on GPUs %s: peak memory %s GiB, GPU memory %s",
            spec.job_id, ",".join(grant.gpu_ids), host, gpu,
        )  # fmt: skip
        return report.model_copy(update={"peak_gpu_memory_gb": gpu_gb})

    async def _scratch_short(self, spec: JobSpec) -> str | None:
        """Why this worker's local scratch can never hold what the job's task asks for, or
        None once it can (`scratch_admission`): at once, or after waiting for the scratch
        of other tasks here to be freed (looked at every `SCRATCH_SAMPLE_S`; a stop of the
        worker ends the wait, the job then goes on to be handed back)."""
        need = spec.resources.scratch_gb
        scratch = self.scratch
        if scratch is None or need <= 0:
            return None
        said = False
        while not self.stop_now:
            free = await asyncio.to_thread(scratch.free_gb)
            task = await asyncio.to_thread(scratch.used_bytes, spec) / GIB
            held = await asyncio.to_thread(scratch.held_bytes) / GIB
            decision = scratch_admission(need, free, task, held)
            if decision == "run":
                return None
            if decision == "refuse":
                return (
                    f"the task asks for {need:g} GiB of local scratch and {scratch.root} has "
                    f"{free or 0.0:.3g} GiB free, {held:.3g} GiB more held by tasks here"
                )
            if not said:
                said = True
                log.info(
                    "job %s waits for %g GiB of local scratch (%.3g GiB free)",
                    spec.job_id,
                    need,
                    free or 0.0,
                )
            await asyncio.sleep(SCRATCH_SAMPLE_S)
        return None

    async def _in_scratch(
        self,
        scratch: ScratchSpace,
        spec: JobSpec,
        ledger: Ledger,
        grant: Grant,
        limit_gb: float,
        view: StaleView,
    ) -> tuple[WorkerReport, str | None]:
        """Run the job with its scratch on this worker's disk and its staged inputs copied
        there; the scratch is measured meanwhile, reported past the task's ``scratch_gb``
        and the job stopped past `scratch_limit_gb`."""
        local = scratch.localize(spec)
        try:
            staged = await scratch.prepare(spec)  # from the store's paths
        except OSError as exc:
            ledger.close_rest("failed", f"cannot stage the inputs of the task: {exc}")
            return WorkerReport.empty(limit_gb), f"staging failed on {self.worker_id}: {exc}"
        try:
            run = asyncio.ensure_future(self._run(local, ledger, grant, limit_gb, view))
            try:
                peak, over = await self._watch_scratch(scratch, local, run)
            except BaseException:
                await cancel_and_wait(run)  # the job itself was cancelled: so is its run
                raise
            error = None
            try:
                report = await run
            except asyncio.CancelledError:
                if over is None:
                    raise
                ledger.close_rest("failed", over)
                report, error = WorkerReport.empty(limit_gb), over
        finally:
            scratch.end(local)
        return _with_scratch(report, staged, peak), error

    async def _watch_scratch(
        self, scratch: ScratchSpace, spec: JobSpec, run: asyncio.Future[WorkerReport]
    ) -> tuple[float, str | None]:
        """Measure the task's scratch until ``run`` ends: the peak in GiB, and why ``run``
        was stopped (its scratch past the hard limit), or None."""
        asked = spec.resources.scratch_gb
        peak = 0.0
        warned = False
        while True:
            used = await asyncio.to_thread(scratch.used_bytes, spec) / GIB
            peak = max(peak, used)
            if asked > 0 and used > asked and not warned:
                warned = True
                log.warning(
                    "task %s/%s uses %.3g GiB of local scratch, more than its scratch_gb %g",
                    spec.run,
                    spec.task,
                    used,
                    asked,
                )
            if asked > 0 and used > scratch_limit_gb(asked):
                run.cancel()
                return peak, (
                    f"stopped: the task wrote {used:.3g} GiB to its local scratch, past "
                    f"{scratch_limit_gb(asked):.3g} GiB (its scratch_gb {asked:g} with the "
                    "margin); ask for more with resources: {scratch_gb: ...}"
                )
            done, _ = await asyncio.wait({run}, timeout=SCRATCH_SAMPLE_S)
            if done:
                final = await asyncio.to_thread(scratch.used_bytes, spec) / GIB
                return max(peak, final), None

    async def _execute(
        self, spec: JobSpec, ledger: Ledger, grant: Grant, limit_gb: float, view: StaleView
    ) -> WorkerReport:
        if spec.kind == "command":
            task = asyncio.ensure_future(
                run_command(
                    spec,
                    ledger,
                    limit_gb=limit_gb if limit_gb > 0 else self.capacity.memory_gb,
                    gpu_ids=grant.gpu_ids,
                    hide_gpus=self.capacity.gpus > 0,
                    cgroups=self.command_cgroups,
                    log_cap=self.command_log_cap,
                    processes=request_slots(spec.kind, self.capacity.processes, spec.uses_cores),
                    engine=self.engine,
                )
            )
            self._commands.add(task)
            try:
                return await task
            except asyncio.CancelledError:
                if not self.stop_now:
                    raise
                ledger.close_rest("not_run", "the worker stopped while the command ran")
                return WorkerReport.empty(limit_gb)
            finally:
                self._commands.discard(task)
        worker = await self.pool.checkout((spec.run, spec.task), grant.gpu_ids)
        if worker.log is not None:
            sink = UnitLogSink(task_logs(Path(spec.paths.task_dir)), spec.attempt)
            worker.log.sink = sink
            self._sinks[spec.job_id] = (sink, worker.pid)
        try:
            if spec.kind == "merge":
                result = await run_merge(worker, spec, ledger, limit_gb=limit_gb)
            else:
                result = await run_chunk(
                    worker,
                    spec,
                    ledger,
                    limit_gb=limit_gb,
                    is_stale=view.is_stale,
                    stopping=lambda: self.stop_now,
                )
        except BaseException:
            worker.kill("stop")  # its request is in flight, its state unknown
            raise
        finally:
            await self.pool.checkin(worker)
        return ledger.report((result.peak_gb,), result.limit_gb, result.killed_for_memory)

    async def _unit_logs(self, spec: JobSpec, entry: ReportEntry, ledger: Ledger) -> None:
        """Write the headers of the job's unit logs; a store that cannot be written is
        logged, the report goes out all the same."""
        sink, pid = self._sinks.pop(spec.job_id, (None, None))
        printed = sink is not None and bool(sink.written or sink.orphan_output)
        if not printed and spec.kind != "command" and not ledger.errors:
            return  # nothing printed, nothing failed: no thread, no file
        try:
            await asyncio.to_thread(
                write_unit_headers, spec, entry, sink, pid, dict(ledger.seconds)
            )
        except OSError as exc:
            log.warning("cannot write the unit logs of job %s: %s", spec.job_id, exc)

    def stop_commands(self) -> None:
        """Stop the commands that run (end of a stop's grace period)."""
        for task in self._commands:
            task.cancel()

    def _entry(
        self,
        spec: JobSpec,
        ledger: Ledger,
        report: WorkerReport,
        started: float,
        error: str | None,
    ) -> ReportEntry:
        return ReportEntry(
            **spec.identity(),
            worker_id=self.worker_id,
            outcomes=dict(ledger.outcomes),
            errors=dict(ledger.errors),
            exceptions=dict(ledger.exceptions),
            report=report,
            started=started,
            finished=now_s(),
            error=error,
        )

    async def xadd(self, entry: ReportEntry) -> None:
        """Add a report to the stream (raises when Redis does not take it)."""
        await self.redis.xadd(self.keys.reports, entry.to_fields())  # type: ignore[arg-type]

    async def _write(self, entry: ReportEntry, holding: RunningJob) -> None:
        """Write a report, or keep it in the spool while Redis is away (and behind older
        kept reports, so that they arrive in order). ``holding`` is its job as the
        heartbeat lists it while the report waits."""
        if self.link is None or self.spool is None:
            await self.xadd(entry)
            return
        await self.link.report(entry, holding)
