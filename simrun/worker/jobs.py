"""The arq job function of the worker container: one job in, exactly one report out. A `Job`
is admitted, executed (on the pool, or through simrun-exec) and reported by itself, never by
arq's hooks (arq skips those on several paths)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import traceback
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simrun.core.jobs import JobSpec, queue_for
from simrun.core.layout import task_logs, task_name_problem
from simrun.core.reports import ReportEntry, RunningJob, WorkerReport, now_s
from simrun.core.sizing import GIB, request_gb, request_gpus, request_slots
from simrun.core.unitlogs import FAILED, UnitLogHeader, attempt_paths, write_atomic
from simrun.core.wire import RUN_ID, Outcome, PayloadError, UnitKey
from simrun.plugins import TaskPaths
from simrun.queues.client import current_attempts
from simrun.queues.connect import cancel_and_wait
from simrun.queues.keys import Keys
from simrun.worker import gpumem
from simrun.worker.admission import AdmissionClosed, AdmissionGate, Grant, Refused, Request
from simrun.worker.capacity import Capacity
from simrun.worker.command import run_command
from simrun.worker.ledger import Ledger
from simrun.worker.link import LINK_ERRORS, RedisLink
from simrun.worker.pool.output import UnitLogSink
from simrun.worker.pool.processes import PoolError, ProcessPool
from simrun.worker.pool.protocol import InstalledType
from simrun.worker.pool.runner import run_chunk, run_merge
from simrun.worker.scratch import ScratchSpace, scratch_admission, scratch_limit_gb
from simrun.worker.settings import WorkerSettings

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

#: How old the view of the current attempts may be when a unit is about to start.
STALE_REFRESH_S = 0.5
#: How many tasks' `confine` verdicts a worker keeps.
VERDICTS_KEPT = 256
#: Seconds between two measurements of a task's local scratch while a job of it runs.
SCRATCH_SAMPLE_S = 1.0
#: The most headers of failed units without output one job writes (a failing setup fails
#: every unit of its chunk alike).
MAX_FAILED_HEADERS = 20


def request_for(spec: JobSpec, capacity: Capacity) -> tuple[Request, float]:
    """What a job asks of admission, and the memory limit (GiB) it runs under: what it asks."""
    res = spec.resources
    what = f"a {spec.kind} job of task {spec.task!r} ({spec.task_type})"
    memory = request_gb(
        spec.kind, res.memory_base_gb, res.memory_per_worker_gb, capacity.processes, spec.uses_cores
    )
    slots = request_slots(spec.kind, capacity.processes, spec.uses_cores)
    return Request(memory, slots, request_gpus(spec.kind, res.gpus), what), memory


def _type_problem(spec: JobSpec, installed: Mapping[str, InstalledType]) -> str | None:
    """Why the installed types cannot run ``spec``: not installed, broken, or of the other
    kind (a command job needs a command, a chunk or merge job a splittable type)."""
    name = spec.task_type
    found = installed.get(name)
    if found is None:
        known = ", ".join(sorted(installed)) or "none"
        return f"task type {name!r} is not installed here (installed: {known})"
    if found.problem is not None:
        return f"task type {name!r} cannot be loaded here: {found.problem}"
    if spec.kind == "command" and found.command is None:
        return f"task type {name!r} has no command: a command job cannot run it"
    if spec.kind != "command" and found.command is not None:
        return f"task type {name!r} runs a command: a {spec.kind} job cannot run it"
    return None


def _name_problem(spec: JobSpec) -> str | None:
    """Why the job's run or task cannot name a directory of the store (`..`, `/`, ...)."""
    if not RUN_ID.fullmatch(spec.run):
        return f"run {spec.run!r} is not a run id"
    why = task_name_problem(spec.task)
    return None if why is None else f"task name {why}"


def _under(path: str, root: str) -> bool:
    """Whether the real path ``path`` is ``root`` or inside it (both real, absolute)."""
    return os.path.commonpath([path, root]) == root


def _paths_problem(spec: JobSpec, store: Path, scratch_root: Path) -> str | None:
    """Why the job's paths are not where this worker's store says: another store, a run or
    task directory not the layout's, an input, output or scratch that leads (``..``, a
    symlink) outside the store's runs, a scratch neither the layout's nor local here."""
    paths = spec.paths
    if os.path.realpath(paths.store) != os.path.realpath(store):
        return f"its store {paths.store!r} is not this worker's store {str(store)!r}"
    layout = TaskPaths.for_task(Path(paths.store), spec.run, spec.task)
    for name in ("run_dir", "task_dir", "out"):
        given, expected = getattr(paths, name), getattr(layout, name)
        if Path(given) != expected:
            return f"its {name} {given!r} is not the store's {str(expected)!r}"
    runs = os.path.realpath(layout.run_dir.parent)
    where = [("task_dir", paths.task_dir), ("out", paths.out)]
    where += [(f"input {port!r}", p) for port, p in sorted(paths.inputs.items())]
    if Path(paths.scratch) == layout.scratch:
        where.append(("scratch", paths.scratch))
    elif not _under(os.path.realpath(paths.scratch), os.path.realpath(scratch_root)):
        return (
            f"its scratch {paths.scratch!r} is neither the store's {str(layout.scratch)!r} "
            f"nor under this worker's local scratch {str(scratch_root)!r}"
        )
    for name, given in where:
        real = os.path.realpath(given)
        if not _under(real, runs):
            return f"its {name} {given!r} leads to {real!r}, outside the store's runs {runs!r}"
    return None


def confine(
    spec: JobSpec,
    store: Path,
    scratch_root: Path,
    installed: Mapping[str, InstalledType],
    served: Collection[str],
) -> str | None:
    """Why this worker must not run ``spec``, whatever its sender, or None: its type is not
    one of the ``installed`` ones (or not of its kind), its run or task is no valid name,
    its queue (image, GPUs) not one of those ``served``, or a path of it is not where the
    worker's ``store`` puts the task (blocking: it resolves symlinks)."""
    queue = queue_for(spec)
    if queue not in served:
        return (
            f"its queue {queue!r} (image {spec.image!r}, {spec.resources.gpus} GPUs) is not "
            f"one this worker serves ({', '.join(served)})"
        )
    return (
        _type_problem(spec, installed)
        or _name_problem(spec)
        or _paths_problem(spec, store, scratch_root)
    )


def _counts(entry: ReportEntry) -> dict[str, int]:
    return dict(Counter(entry.outcomes.values()))


def _log_entry(entry: ReportEntry) -> None:
    """One line per job: at debug level when every unit is done, else a warning."""
    counts = _counts(entry)
    summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    level = logging.DEBUG if set(counts) <= {"done", "stale"} else logging.WARNING
    note = f" ({entry.error.splitlines()[0]})" if entry.error else ""
    memory = " killed for memory" if entry.report.killed_for_memory else ""
    log.log(level, "job %s: %s%s%s", entry.job_id, summary, memory, note)


@dataclass
class StaleView:
    """Which units of a job were dispatched again with a newer attempt, as Redis said at most
    ``refresh_s`` ago; while it is away they count as current (running one twice is harmless)."""

    redis: Redis
    keys: Keys
    spec: JobSpec
    link: RedisLink
    refresh_s: float = STALE_REFRESH_S
    _current: dict[UnitKey, int] = field(default_factory=dict)
    _at: float = -float("inf")

    async def is_stale(self, unit: UnitKey) -> bool:
        if time.monotonic() - self._at > self.refresh_s and self.link.is_up:
            try:
                self._current = await current_attempts(
                    self.redis, self.keys, self.spec.run, self.spec.task, self.spec.units
                )
            except LINK_ERRORS as exc:
                self.link.lost(exc)
            self._at = time.monotonic()
        return self._current.get(unit, self.spec.attempt) > self.spec.attempt


class Job:
    """One job on this worker, from its payload to its report: `admit`, `execute`, `report`."""

    def __init__(self, worker: JobHandler, spec: JobSpec) -> None:
        self.worker, self.spec = worker, spec
        self.started = now_s()
        self.ledger = Ledger(spec.units)
        self.request, self.limit_gb = request_for(spec, worker.capacity)
        self.view = StaleView(worker.redis, worker.keys, spec, worker.link)
        self.measured = WorkerReport.empty(self.limit_gb)
        self.error: str | None = None
        self.grant: Grant | None = None
        #: The sink of the job's unit logs and the pid of the process it ran in.
        self.sink: UnitLogSink | None = None
        self.pid: int | None = None
        #: Set when the job was refused before anything ran (`refuse`): nothing is written.
        self.refused = False

    def refuse(self, problem: str, queue: str) -> None:
        """Refuse the job before anything runs (what `confine` found), saying so once."""
        self.refused = True
        self._end("refused", f"refused by worker {self.worker.worker_id}: {problem}")
        log.error(
            "job %s from queue %s refused by worker %s: %s",
            self.spec.job_id, queue, self.worker.worker_id, problem,
        )  # fmt: skip

    def _end(self, outcome: Outcome, error: str) -> None:
        self.ledger.close_rest(outcome)
        self.error = error

    async def admit(self) -> bool:
        """Skip the stale units, then wait for the scratch and a grant: True once granted,
        False (units closed, error set) when the job will not run."""
        worker, spec = self.worker, self.spec
        for unit in spec.units:
            if await self.view.is_stale(unit):
                self.ledger.record(unit, "stale")
        if not self.ledger.pending:
            return False
        short = await self._scratch_short()
        if short is not None:
            self._end("refused", f"refused by worker {worker.worker_id}: {short}")
            return False
        try:
            self.grant = await worker.gate.acquire(self.request)
        except Refused as exc:
            self._end("refused", f"refused by worker {worker.worker_id}: {exc}")
            return False
        except AdmissionClosed:
            self._end("not_run", "the worker stopped before the job was admitted; handed back")
            return False
        worker.running[spec.job_id] = worker.running[spec.job_id].admitted()
        return True

    async def execute(self) -> None:
        """Run the admitted job in this worker's scratch, then release its grant."""
        assert self.grant is not None, "execute() needs a grant of admit()"
        worker = self.worker
        try:
            if worker.stop_now:
                self.error = "the worker stopped before the job started; handed back"
            else:
                await self._in_scratch(worker.scratch)
        except PoolError as exc:
            self.measured = WorkerReport.empty(self.limit_gb)
            self.error = f"no worker process: {exc}"
        finally:
            worker.gate.release(self.grant)

    async def report(self, *, cancelled: bool = False) -> ReportEntry:
        """Close the units left ("not_run"), write their logs' headers and the report (a
        job ``cancelled`` by a shutdown is handed back at once: no headers)."""
        if cancelled:
            self.ledger.close_rest("not_run", "the job was cancelled: the worker shut down")
            self.error = "cancelled: handed back"
        self.ledger.close_rest("not_run")
        entry = ReportEntry(
            **self.spec.identity(),
            worker_id=self.worker.worker_id,
            outcomes=dict(self.ledger.outcomes),
            errors=dict(self.ledger.errors),
            exceptions=dict(self.ledger.exceptions),
            report=self.measured,
            started=self.started,
            finished=now_s(),
            error=self.error,
        )
        if not cancelled and not self.refused:  # a refused job's paths are not trusted
            await self._unit_logs(entry)
        await self.worker.link.report(entry, RunningJob.of(self.spec, "running"))
        return entry

    async def _run(self, spec: JobSpec) -> WorkerReport:
        """`_execute`, measuring the memory of the GPUs it was granted (`gpumem`)."""
        assert self.grant is not None
        gpu_ids = self.grant.gpu_ids
        if not gpu_ids:
            return await self._execute(spec)
        report, gpu_gb = await gpumem.measure(gpu_ids, self._execute(spec))
        host = ", ".join(f"{p:.3g}" for p in report.peak_memory_gb) or "-"
        gpu = "unknown (no answer from nvidia-smi)" if gpu_gb is None else f"{gpu_gb:.3g} GiB"
        log.info(
            "job %s on GPUs %s: peak memory %s GiB, GPU memory %s",
            spec.job_id, ",".join(gpu_ids), host, gpu,
        )  # fmt: skip
        return report.model_copy(update={"peak_gpu_memory_gb": gpu_gb})

    async def _scratch_short(self) -> str | None:
        """Why this worker's scratch can never hold what the task asks for, or None once it
        can (`scratch_admission`), maybe after waiting for other tasks' scratch to be freed."""
        spec, scratch = self.spec, self.worker.scratch
        need = spec.resources.scratch_gb
        if need <= 0:
            return None
        said = False
        while not self.worker.stop_now:
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
                    spec.job_id, need, free or 0.0,
                )  # fmt: skip
            await asyncio.sleep(SCRATCH_SAMPLE_S)
        return None

    async def _in_scratch(self, scratch: ScratchSpace) -> None:
        """Run the job with its scratch and staged inputs on this worker's disk."""
        local = scratch.localize(self.spec)
        try:
            staged = await scratch.prepare(self.spec)
        except OSError as exc:
            self.ledger.close_rest("failed", f"cannot stage the inputs of the task: {exc}")
            self.error = f"staging failed on {self.worker.worker_id}: {exc}"
            return
        try:
            report, peak = await self._watch_scratch(scratch, local)
        finally:
            scratch.end(local)
        self.measured = report.model_copy(
            update={"staged_bytes": staged.bytes, "staged_s": staged.seconds, "scratch_gb": peak}
        )

    async def _watch_scratch(
        self, scratch: ScratchSpace, spec: JobSpec
    ) -> tuple[WorkerReport, float]:
        """Run the job measuring its scratch: its report and the peak in GiB. Past
        `scratch_limit_gb` the run is stopped, and the units left fail."""
        asked, peak, warned = spec.resources.scratch_gb, 0.0, False
        run = asyncio.ensure_future(self._run(spec))
        try:
            while not run.done():
                used = await asyncio.to_thread(scratch.used_bytes, spec) / GIB
                peak = max(peak, used)
                if asked > 0 and used > asked and not warned:
                    warned = True
                    log.warning(
                        "task %s/%s uses %.3g GiB of local scratch, more than its scratch_gb %g",
                        spec.run, spec.task, used, asked,
                    )  # fmt: skip
                if asked > 0 and used > scratch_limit_gb(asked):
                    await cancel_and_wait(run)
                    if run.cancelled():
                        self.error = (
                            f"stopped: the task wrote {used:.3g} GiB to its local scratch, past "
                            f"{scratch_limit_gb(asked):.3g} GiB (its scratch_gb {asked:g} with "
                            "the margin); ask for more with resources: {scratch_gb: ...}"
                        )
                        self.ledger.close_rest("failed", self.error)
                        return WorkerReport.empty(self.limit_gb), peak
                await asyncio.wait({run}, timeout=SCRATCH_SAMPLE_S)
            final = await asyncio.to_thread(scratch.used_bytes, spec) / GIB
            return run.result(), max(peak, final)
        finally:
            await cancel_and_wait(run)  # the job itself was cancelled: so is its run

    async def _execute(self, spec: JobSpec) -> WorkerReport:
        """Run the job: a command through simrun-exec, a chunk or a merge on the pool."""
        assert self.grant is not None
        if spec.kind == "command":
            return await self._command(spec, self.grant)
        pool = self.worker.pool
        process = await pool.checkout((spec.run, spec.task), self.grant.gpu_ids)
        if process.log is not None:
            self.sink = UnitLogSink(task_logs(Path(spec.paths.task_dir)), spec.attempt)
            process.log.sink = self.sink
            self.pid = process.pid
        try:
            if spec.kind == "merge":
                result = await run_merge(process, spec, self.ledger, limit_gb=self.limit_gb)
            else:
                result = await run_chunk(
                    process,
                    spec,
                    self.ledger,
                    limit_gb=self.limit_gb,
                    is_stale=self.view.is_stale,
                    stopping=lambda: self.worker.stop_now,
                )
        except BaseException:
            process.kill("stop")  # its request is in flight, its state unknown
            raise
        finally:
            await pool.checkin(process)
        return self.ledger.report((result.peak_gb,), result.limit_gb, result.killed_for_memory)

    async def _command(self, spec: JobSpec, grant: Grant) -> WorkerReport:
        """Run a command job through simrun-exec; one cancelled by a stop hands back."""
        worker, capacity = self.worker, self.worker.capacity
        task = asyncio.ensure_future(
            run_command(
                spec,
                self._template(),
                self.ledger,
                limit_gb=self.limit_gb if self.limit_gb > 0 else capacity.memory_gb,
                gpu_ids=grant.gpu_ids,
                hide_gpus=capacity.gpus > 0,
                cgroups=worker.settings.cgroups,
                log_cap=worker.settings.command_log_cap,
                processes=self.request.slots,
                engine=worker.engine,
            )
        )
        worker.commands.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            if not worker.stop_now:
                raise
            self.ledger.close_rest("not_run", "the worker stopped while the command ran")
            return WorkerReport.empty(self.limit_gb)
        finally:
            worker.commands.discard(task)

    def _template(self) -> str:
        """The command template of the job's type as installed here (`confine` checked it
        has one); the payload has none."""
        command = self.worker.pool.installed[self.spec.task_type].command
        assert command is not None, "confine() refuses a command job of a type without one"
        return command

    async def _unit_logs(self, entry: ReportEntry) -> None:
        """Write the headers of the job's unit logs (a failure is logged: the report goes out)."""
        sink, spec, ledger = self.sink, self.spec, self.ledger
        printed = sink is not None and bool(sink.written or sink.orphan_output)
        if not printed and spec.kind != "command" and not ledger.errors:
            return  # nothing printed, nothing failed: no thread, no file
        try:
            await asyncio.to_thread(self._write_headers, entry)
        except OSError as exc:
            log.warning("cannot write the unit logs of job %s: %s", spec.job_id, exc)

    def _write_headers(self, entry: ReportEntry) -> int:
        """Write the log header of each unit that printed or failed (at most
        `MAX_FAILED_HEADERS` without output), and of a command's attempt; how many (blocking)."""
        spec, sink = self.spec, self.sink
        if sink is not None:
            sink.settle_orphan()  # the last output of a process that died, to its unit
        written = dict(sink.written) if sink is not None else {}
        logs = task_logs(Path(spec.paths.task_dir))
        failed_only = count = 0
        for unit, outcome in entry.outcomes.items():
            if unit == "command" and outcome not in FAILED | {"done"}:
                continue  # an attempt that never ran (stale, handed back)
            if unit not in written and unit != "command":
                if outcome not in FAILED:
                    continue
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
                pid=self.pid,
                outcome=outcome,
                error=entry.errors.get(unit) or (entry.error if outcome in FAILED else None),
                seconds=self.ledger.seconds.get(unit),
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


@dataclass
class JobHandler:
    """Runs jobs for one worker container; ``running`` is what its heartbeat shows."""

    redis: Redis
    keys: Keys
    worker_id: str
    capacity: Capacity
    gate: AdmissionGate
    pool: ProcessPool
    link: RedisLink
    settings: WorkerSettings
    #: The engine that runs the commands of image jobs in their image (None: here).
    engine: str | None
    scratch: ScratchSpace
    running: dict[str, RunningJob] = field(default_factory=dict)
    #: Set when the grace period of a stop is over: what is left is handed back.
    stop_now: bool = False
    commands: set[asyncio.Task[WorkerReport]] = field(default_factory=set)
    #: The verdicts of `confine` of the last tasks seen (the jobs of a task share them).
    verdicts: dict[str, str | None] = field(default_factory=dict)

    async def handle(self, ctx: Mapping[str, Any], payload: object) -> dict[str, Any]:
        """The arq job function (registered as `simrun.queues.JOB_FUNCTION`)."""
        try:
            spec = JobSpec.from_dict(payload)
        except PayloadError as exc:
            log.error("dropped arq job %s: %s", ctx.get("job_id"), exc)
            return {"error": str(exc)}
        queue = ctx.get("queue")
        entry = await self.run(spec, queue if isinstance(queue, str) else None)
        return {"job_id": spec.job_id, "outcomes": _counts(entry)}

    def confine(self, spec: JobSpec) -> str | None:
        """Why this worker must not run ``spec`` (`confine` with its store, scratch, installed
        types and queues), or None (blocking)."""
        settings = self.settings
        installed, served = self.pool.installed, settings.queue_names
        return confine(spec, settings.store, self.scratch.root, installed, served)

    async def verdict(self, spec: JobSpec) -> str | None:
        """`confine` of ``spec``, judged once for the jobs of a task that say the same of
        it (type, kind, image, GPUs, paths), among the last `VERDICTS_KEPT` tasks."""
        key = spec.model_dump_json(
            include={"kind", "run", "task", "task_type", "image", "paths", "resources"}
        )
        if key not in self.verdicts:
            if len(self.verdicts) >= VERDICTS_KEPT:
                del self.verdicts[next(iter(self.verdicts))]
            self.verdicts[key] = await asyncio.to_thread(self.confine, spec)
        return self.verdicts[key]

    async def run(self, spec: JobSpec, queue: str | None = None) -> ReportEntry:
        """Run one job (that came from ``queue``) and report it; the entry written."""
        job = Job(self, spec)
        self.running[spec.job_id] = RunningJob.of(spec)
        try:
            problem = await self.verdict(spec)
            if problem is not None:
                job.refuse(problem, queue or queue_for(spec))
            elif await job.admit():
                await job.execute()
        except asyncio.CancelledError:
            await asyncio.shield(job.report(cancelled=True))
            raise
        except Exception:  # a bug of the worker must still produce a report
            log.exception("job %s failed inside the worker", spec.job_id)
            job.error = f"the worker failed while running the job:\n{traceback.format_exc()}"
        finally:
            self.running.pop(spec.job_id, None)
        entry = await job.report()
        if not job.refused:  # a refused one said so at error level already
            _log_entry(entry)
        return entry

    def stop_commands(self) -> None:
        """Stop the commands that run (end of a stop's grace period)."""
        for task in self.commands:
            task.cancel()
