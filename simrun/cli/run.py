"""``simrun run``: a whole campaign on this machine (embedded mode), and the embedded side of
``simrun replay --store``.

Both start a `simrun.local.session.LocalSession` (Redis, the service in this process, worker
containers as child processes), follow the run with the live view and print how it ended.
Ctrl-C stops the workers (their running units finish within the grace period or are handed
back), lets the service record what they reported, and leaves the run in the store to go
on with ``simrun run --resume RUN`` (or ``simrun replay RUN --store DIR``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from simrun.cli import options as opt
from simrun.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    Prepared,
    console,
    err_console,
    load_types_from_here,
    prepare,
    shell_join,
)
from simrun.cli.dashboard import dashboard_url, open_dashboard
from simrun.cli.follow import STUCK_AFTER_S, follow, report_end
from simrun.cli.forecast import pool_advice, pool_of, pool_text
from simrun.cli.progress import make_view, summary_table
from simrun.core.intake import InputLimits
from simrun.core.layout import StoreLayout
from simrun.core.sizing import image_queue
from simrun.core.states import Limits
from simrun.core.timing import DEFAULT_GRACE_S
from simrun.core.views import FailureView, RunView
from simrun.local.machine import (
    LocalError,
    default_capacity,
    gpu_shares,
    local_gpus,
    local_scratch_gb,
    machine,
)
from simrun.plugins import TaskType

if TYPE_CHECKING:
    from rich.console import Console

    from simrun.cli.dryrun import DryRow
    from simrun.local.session import LocalOptions, LocalSession
    from simrun.workflow import SettingOverride

# The embedded session (the service, uvicorn, Redis's client) and the dry run's imports are
# imported when a run starts: `simrun run --help` does not wait for them.

#: Seconds after a change before the run is read again (a burst of steps is read once).
CHANGE_GAP_S = 0.02


@dataclass(frozen=True)
class LocalPool:
    """The worker containers of an embedded session."""

    workers: int
    processes: int
    memory_gb: float
    #: The GPUs of the machine, dealt among the workers (`simrun.local.machine.gpu_shares`).
    gpu_ids: tuple[str, ...] = ()

    def text(self) -> str:
        text = pool_text(self.workers, self.processes, self.memory_gb)
        if self.gpu_ids:
            text += f"; GPUs {', '.join(self.gpu_ids)}"
        return text

    @property
    def gpus_per_worker(self) -> int:
        """The most GPUs one worker gets (the forecast's figure)."""
        return max((len(s) for s in gpu_shares(self.gpu_ids, self.workers)), default=0)


def local_pool(workers: int, processes: int | None, memory_gb: float | None) -> LocalPool:
    """The pool given, completed from this machine (its cores, 80% of its free memory, its
    GPUs: CUDA_VISIBLE_DEVICES, else nvidia-smi -L)."""
    cores, available_gb = machine()
    procs, memory = default_capacity(cores, available_gb, workers, processes, memory_gb)
    return LocalPool(workers, procs, memory, local_gpus(os.environ))


@dataclass(frozen=True)
class ReplayRequest:
    """Which failed units to put back (see `simrun.service.controller.Controller.replay`);
    with ``rerun``, every unit of ``task`` and of the tasks reading it
    (`simrun.service.controller.Controller.rerun`)."""

    task: str | None = None
    units: tuple[int, ...] = ()
    memory_gb: float | None = None
    rerun: bool = False


def rerun_line(tasks: list[str], units: int) -> str:
    """What a rerun does, in words: the task, the units it had, the tasks downstream."""
    head = f"task {tasks[0]!r} runs again, all of its units"
    had = f"{units:,} unit{'s' if units != 1 else ''}"
    if len(tasks) == 1:
        return f"{head} ({had} before)"
    rest = ", ".join(repr(t) for t in tasks[1:])
    return f"{head}, and {_tasks(len(tasks) - 1)} reading it: {rest} ({had} before in all)"


def _tasks(count: int) -> str:
    return f"{count} task{'s' if count != 1 else ''}"


def _commands(run_id: str, store: Path, plugins: tuple[str, ...]) -> tuple[str, str]:
    extra = [a for ref in plugins for a in ("--plugins", ref)]
    replay = shell_join(["simrun", "replay", run_id, "--store", str(store), *extra])
    resume = shell_join(["simrun", "run", "--resume", run_id, "--store", str(store), *extra])
    return replay, resume


async def stored_run_images(
    store: Path, run_id: str, types: dict[str, TaskType], engine: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """The environment image of run ``run_id`` of ``store`` and the images its splittable
    tasks run in (`simrun.local.session.unit_images`, from its stored document); None and
    none when there is no such run (`check_run` says so). `LocalError` when a task of it
    runs in an image and there is no container ``engine``, before anything starts (as for
    a new run)."""
    from simrun.local.session import image_problem, unit_images
    from simrun.runstore.store import RunStore
    from simrun.workflow import WorkflowError, parse_workflow

    db = StoreLayout(store).db
    if not db.is_file():
        return None, ()
    runs = await RunStore.open(db)
    try:
        row = await runs.run(run_id)
    finally:
        await runs.close()
    if row is None:
        return None, ()
    try:
        doc = parse_workflow(row.document)
    except WorkflowError:
        return row.image, ()
    tasks = [(t.name, types[t.type]) for t in doc.tasks if t.type in types]
    problem = image_problem(tasks, engine, row.image)
    if problem is not None:
        raise LocalError(problem)
    return row.image, unit_images(tasks, row.image)


async def check_run(store: Path, run_id: str, replay: ReplayRequest | None) -> None:
    """Fail before anything starts when ``run_id`` of ``store`` cannot go on: no such
    store or run, a run that ended with nothing failed, an ended run without a replay."""
    from simrun.runstore.store import RunStore

    db = StoreLayout(store).db
    if not db.is_file():
        raise LocalError(
            f"{store} is not a simrun store (there is no {db}); give the --store of the run"
        )
    runs = await RunStore.open(db)
    try:
        row = await runs.run(run_id)
        if row is None:
            latest = [r.id for r in await runs.runs(limit=3)]
            hint = f"; its latest: {', '.join(latest)}" if latest else ""
            raise LocalError(f"there is no run {run_id!r} in {store}{hint}")
        failed = await runs.failures(run_id)
    finally:
        await runs.close()
    if row.state == "running":
        return
    if replay is None:
        what = "; retry its failed units with `simrun replay`" if row.state == "failed" else ""
        raise LocalError(f"run {run_id} already ended ({row.state}){what}")
    if not failed and not replay.rerun:
        raise LocalError(
            f"run {run_id} ended ({row.state}) with no failed units to replay; "
            "run a task again, done units too, with --task TASK --all"
        )


async def _start_run(
    session: LocalSession,
    out: Console,
    prepared: Prepared | None,
    run_id: str | None,
    replay: ReplayRequest | None,
) -> str:
    """Submit the workflow, or check the run to go on with (replaying its failed units when
    asked); the run's id."""
    controller = session.controller
    if prepared is not None:
        new_id = await controller.submit(
            prepared.doc,
            prepared.settings,
            prepared.text,
            base=prepared.base,
            reuse=prepared.reuse,
            rerun=prepared.rerun,
        )
        name = f" ({prepared.doc.name})" if prepared.doc.name else ""
        out.print(f"run {new_id}{name} submitted: {_tasks(len(prepared.doc.tasks))}")
        return new_id
    assert run_id is not None  # checked by check_run before the session started
    if replay is not None and replay.rerun and replay.task is not None:
        tasks, units = await controller.rerun(run_id, replay.task, replay.memory_gb)
        out.print(f"run {run_id}: {rerun_line(tasks, units)}")
        return run_id
    if replay is not None and await controller.queries.failures(run_id):
        count = await controller.replay(run_id, replay.task, replay.units, replay.memory_gb)
        out.print(f"run {run_id}: {count} failed units put back; the done ones are kept")
        return run_id
    out.print(f"run {run_id}: going on where it stopped")
    return run_id


def held_line(held: tuple[str, ...], store: Path, plugins: tuple[str, ...]) -> str | None:
    """The line about the interrupted runs a session leaves alone (None without any): which
    they are, and the commands that go on with one or cancel it."""
    if not held:
        return None
    extra = [a for ref in plugins for a in ("--plugins", ref)]
    one = held[0] if len(held) == 1 else "RUN"
    resume = shell_join(["simrun", "run", "--resume", one, "--store", str(store), *extra])
    cancel = shell_join(["simrun", "cancel", one, "--store", str(store)])
    runs = "run " + held[0] if len(held) == 1 else "runs " + ", ".join(held)
    return (
        f"note: {runs} of this store {'was' if len(held) == 1 else 'were'} interrupted and "
        f"{'is' if len(held) == 1 else 'are'} left as stopped; go on: {resume}; "
        f"or drop: {cancel}"
    )


def _report_ended(
    out: Console,
    final: RunView,
    failures: list[FailureView],
    replay_cmd: str,
    shown_store: Path,
    current: str,
) -> int:
    """Print the end of a run that ended (its summary, what failed and how to replay it,
    where the learned resources are); its exit status."""
    code = report_end(
        out,
        final,
        failures,
        replay_cmd,
        str(StoreLayout(shown_store).run_dir(current)),
        logs_where=["--store", str(shown_store)],
    )
    learned = shell_join(["simrun", "resources", "--store", str(shown_store)])
    out.print(f"[dim]what was learned for the next runs: {escape(learned)}[/]", soft_wrap=True)
    return code


async def embedded(
    options: LocalOptions,
    types: dict[str, TaskType],
    shown_store: Path,
    pool: LocalPool,
    *,
    prepared: Prepared | None = None,
    run_id: str | None = None,
    replay: ReplayRequest | None = None,
    every_s: float = opt.DEFAULT_EVERY_S,
    open_browser: bool = False,
) -> int:
    """Run (or go on with) one run in an embedded session; the exit status. With
    ``open_browser``, the run's dashboard opens in the browser, and the service stays up
    after the run until Ctrl-C (so the page can still be read)."""
    if run_id is not None:
        await check_run(shown_store, run_id, replay)
    out, err = console(), err_console()
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    from simrun.local.session import LocalSession

    session = LocalSession(options, types)
    presses = 0

    def on_signal() -> None:
        nonlocal presses
        presses += 1
        interrupted.set()  # follow() returns and says what happens next
        if presses > 1:
            err.print("[yellow]stopping the running units now[/]")
            session.hurry()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        async with session:
            out.print(f"store    {escape(str(shown_store))} (learned resources in simrun.db)")
            out.print(f"redis    {escape(session.redis_note)}")
            out.print(f"workers  {pool.text()} (logs in {escape(str(shown_store / 'logs'))})")
            out.print(f"service  {session.url}")
            note = held_line(session.held, shown_store, options.plugins)
            if note is not None:
                out.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
            current = await _start_run(session, out, prepared, run_id, replay)
            page = dashboard_url(session.url, current)
            out.print(f"dashboard {page}", soft_wrap=True)
            if open_browser:
                problem = open_dashboard(page)
                if problem is not None:
                    err.print(f"[yellow]{escape(problem)}[/]", soft_wrap=True)
            replay_cmd, resume_cmd = _commands(current, shown_store, options.plugins)
            watch = f"simrun status {current} --url {session.url}"
            out.print(f"watch it from another shell: {watch}", soft_wrap=True)
            reader = session.reader(shown_store)
            version = 0

            async def fetch() -> RunView:
                nonlocal version
                version = reader.version(current)  # before the read: no change is missed
                view = await reader.run(current)
                assert view is not None  # the run was found above and runs are never deleted
                return view

            async def changed(timeout_s: float) -> None:
                # woken by the controller's change notification, not a timer (which only
                # bounds the wait, for the checks of `follow`); a burst is read once
                await reader.changed(current, version, timeout_s)
                await asyncio.sleep(CHANGE_GAP_S)

            outcome = await follow(
                fetch,
                make_view(out, every_s),
                changed=changed,
                interrupted=interrupted,
                problem=session.problem,
                stuck_after_s=STUCK_AFTER_S,
            )
            if outcome.reason == "interrupted":
                err.print(
                    "[yellow]stopping: running units finish or are handed back "
                    f"(within {options.grace_s:g} s; Ctrl-C again to stop them now)[/]"
                )
            if outcome.reason != "ended":
                await session.drain()
            final = await fetch()
            failures = await reader.failures(current)
            if open_browser and outcome.reason == "ended":  # the end first, then the page
                code = _report_ended(out, final, failures, replay_cmd, shown_store, current)
                out.print(f"the dashboard stays up at {page}: Ctrl-C to stop", soft_wrap=True)
                await interrupted.wait()
                return code
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if outcome.reason == "ended":
        return _report_ended(out, final, failures, replay_cmd, shown_store, current)
    out.print(summary_table(final, now_s=time.time()))
    if outcome.reason == "interrupted":
        out.print(f"[yellow]interrupted:[/] the workers are stopped; run {current} is kept.")
        out.print("go on with it:")
        out.print(f"  {resume_cmd}", markup=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    if outcome.reason == "stuck":
        out.print(f"[red]run {current} cannot go on:[/] {escape(outcome.detail)}")
        out.print("give the worker containers more memory and go on with it:")
        out.print(f"  {resume_cmd} --worker-memory-gb GIB", markup=False, soft_wrap=True)
        return EXIT_FAILED
    out.print(f"[red]the embedded session failed:[/] {escape(outcome.detail)}")
    out.print("the run is kept; once fixed, go on with it:")
    out.print(f"  {resume_cmd}", markup=False, soft_wrap=True)
    return EXIT_FAILED


def local_options(
    store: Path,
    pool: LocalPool,
    plugins: tuple[str, ...],
    types: dict[str, TaskType],
    *,
    redis_url: str | None = None,
    token: str | None = None,
    limits: Limits | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    intake: InputLimits | None = None,
    probe: bool = True,
    go_on_with: str | None = None,
    engine: str | None = None,
    run_image: str | None = None,
    in_image: tuple[str, ...] = (),
    scratch_dir: Path | None = None,
) -> LocalOptions:
    """The options of an embedded session over ``store`` (a private Redis without
    ``redis_url``). Interrupted runs of the store are left alone, but ``go_on_with``."""
    from simrun.local.session import LocalOptions, images_of

    return LocalOptions(
        store=store,
        workers=pool.workers,
        processes=pool.processes,
        memory_gb=pool.memory_gb,
        plugins=plugins,
        python_path=(os.getcwd(),) if plugins else (),
        images=images_of(list(types.values()), run_image),
        unit_images=in_image if engine is not None else (),
        engine=engine,
        scratch_dir=scratch_dir,
        gpu_ids=pool.gpu_ids,
        redis_url=redis_url,
        token=token,
        limits=limits or Limits(),
        grace_s=grace_s,
        intake=intake or InputLimits(),
        probe=probe,
        hold_interrupted=True,
        go_on_with=go_on_with,
    )


RESUME_HELP = "Go on with an interrupted run of the store instead of submitting a workflow."


@click.command("run")
@click.argument("workflow", required=False, type=click.Path(path_type=Path, dir_okay=False))
@opt.STORE
@opt.EMBEDDED_REDIS_URL
@opt.TOKEN
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Worker containers to start.")  # fmt: skip
@opt.container_processes_option(
    "Worker processes per container [default: this machine's CPUs / workers]."
)
@opt.worker_memory_option(
    "Memory of each worker container in GiB [default: 80% of the free memory / workers]."
)
@opt.PLUGINS
@opt.SET
@opt.NO_REUSE
@opt.RERUN
@click.option("--dry-run", is_flag=True, help="Check, count and forecast; start nothing.")
@click.option("--resume", metavar="RUN", default=None, help=RESUME_HELP)
@opt.limits_options
@opt.GRACE_S
@opt.EVERY_S
@opt.intake_options
@opt.PROBE
@opt.ENGINE
@opt.scratch_dir_option("STORE/logs/worker-local/scratch")
@click.option(
    "--open", "open_browser", is_flag=True,
    help="Open the run's dashboard in the browser (and keep it up after the run, to Ctrl-C).",
)  # fmt: skip
def run(
    workflow: Path | None,
    store: Path,
    redis_url: str | None,
    token: str | None,
    workers: int,
    processes: int | None,
    worker_memory_gb: float | None,
    plugins: tuple[str, ...],
    overrides: tuple[SettingOverride, ...],
    reuse: bool,
    rerun: tuple[str, ...],
    dry_run: bool,
    resume: str | None,
    max_retries: int,
    max_kills: int,
    grace_s: float,
    every_s: float,
    intake: InputLimits,
    probe: bool,
    engine: str | None,
    scratch_dir: Path | None,
    open_browser: bool,
) -> None:
    """Run WORKFLOW on this machine: Redis, the service and worker containers are started
    for the run and stopped after it, with live progress.

    Exits 0 when the run succeeded; otherwise 1 with the failed units and the command that
    retries them, or 130 after Ctrl-C (the run is kept: go on with --resume RUN).
    """
    if (workflow is None) == (resume is None):
        raise click.UsageError("give a WORKFLOW to run, or --resume RUN to go on with one")
    if dry_run and resume is not None:
        raise click.UsageError("--dry-run needs a WORKFLOW (it forecasts a new run)")
    if overrides and resume is not None:
        raise click.UsageError("--set needs a WORKFLOW (a resumed run keeps its settings)")
    if (rerun or not reuse) and resume is not None:
        raise click.UsageError(
            "--rerun and --no-reuse need a WORKFLOW (a resumed run keeps its own)"
        )
    shown_store = store
    scratch_dir = scratch_dir.resolve() if scratch_dir is not None else None
    from simrun.local import lock

    lock.check_free(shown_store)  # before the plan: the lock's error is the first line
    types = load_types_from_here(plugins)
    pool = local_pool(workers, processes, worker_memory_gb)
    out = console()
    prepared: Prepared | None = None
    from simrun.local.session import image_problem, images_of, local_engine, unit_images

    found_engine = local_engine(engine)
    in_images: list[tuple[str, TaskType]] = []
    if workflow is not None:
        from simrun.cli.dryrun import print_forecast, reuse_forecasts, store_resolver, task_plans

        prepared = prepare(workflow, types, overrides=overrides, programs=True)
        prepared = replace(prepared, reuse=reuse, rerun=rerun)
        in_images = [(t.name, types[t.type]) for t in prepared.doc.tasks if t.type in types]
        run_images = images_of(list(types.values()), prepared.doc.image)
        engine_line = image_problem(in_images, found_engine, prepared.doc.image)
        if engine_line is not None and not dry_run:
            raise LocalError(engine_line)
        reused = asyncio.run(reuse_forecasts(prepared, types, shown_store))
        rows: list[DryRow] = asyncio.run(
            task_plans(prepared.doc, types, store_resolver(shown_store), reused.whole, reused.units)
        )
        name = f" ({prepared.doc.name})" if prepared.doc.name else ""
        model = f", model {prepared.doc.model!r}" if prepared.doc.model else ""
        out.print(f"{escape(str(workflow))}{name}: {_tasks(len(rows))}{model}")
        # the workers' scratch: --scratch-dir (SIMRUN_SCRATCH_DIR), else under the store
        room = local_scratch_gb(scratch_dir or shown_store)
        result = print_forecast(
            out,
            rows,
            pool_of(
                pool.workers,
                pool.processes,
                pool.memory_gb,
                gpus=pool.gpus_per_worker,
                scratch_gb=room,
                queues=("cpu", "gpu", *(image_queue(i) for i in run_images)),
            ),
            pool.text(),
        )
        if dry_run and engine_line is not None:
            out.print(f"[red]{escape(engine_line)}[/]")
            sys.exit(EXIT_FAILED)
        if dry_run:
            from simrun.cli.dryrun import dry_run_exit

            sys.exit(dry_run_exit(out, result, "dry run: nothing was started, enqueued or written"))
        problems = [t for t in result.tasks if t.problem] if result is not None else []
        if problems:
            problem = problems[0].problem or ""
            raise LocalError(
                f"this pool cannot run task {problems[0].plan.name!r} ({problem}): "
                f"{pool_advice(problem)}"
            )
    if prepared is not None:
        run_image, in_image = prepared.doc.image, unit_images(in_images, prepared.doc.image)
    else:
        run_image, in_image = asyncio.run(
            stored_run_images(shown_store, resume or "", types, found_engine)
        )
    options = local_options(
        shown_store,
        pool,
        plugins,
        types,
        redis_url=redis_url,
        token=token,
        limits=Limits(max_retries=max_retries, max_kills=max_kills),
        grace_s=grace_s,
        intake=intake,
        probe=probe,
        go_on_with=resume,
        engine=found_engine,
        scratch_dir=scratch_dir,
        run_image=run_image,
        in_image=in_image,
    )
    code = asyncio.run(
        embedded(
            options,
            types,
            shown_store,
            pool,
            prepared=prepared,
            run_id=resume,
            every_s=every_s,
            open_browser=open_browser,
        )
    )
    sys.exit(code)
