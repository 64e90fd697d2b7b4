"""``simrun run``: a whole campaign on this machine, and the embedded side of ``simrun
replay --store``: an embedded session (`simrun.local`) followed with the live view. Ctrl-C
stops the workers and keeps the run, to go on with ``simrun run --resume RUN``."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from simrun.app.types import load_types_from_here
from simrun.cli import options as opt
from simrun.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, console, err_console, shell_join
from simrun.cli.dashboard import dashboard_url, open_dashboard
from simrun.cli.progress import make_view, report_end, summary_table
from simrun.config import click_options
from simrun.core.layout import StoreLayout
from simrun.local.machine import LocalError
from simrun.local.settings import LocalOptions

if TYPE_CHECKING:
    from rich.console import Console

    from simrun.app.follow import FollowEnd
    from simrun.app.prepare import Prepared
    from simrun.core.views import FailureView
    from simrun.local.session import EmbeddedSession
    from simrun.local.start import LocalPool, ReplayRequest
    from simrun.plugins import TaskType
    from simrun.workflow import SettingOverride

# The embedded session and the dry run are imported when a run starts: `simrun run --help`
# does not wait for them.

#: Seconds after a change before the run is read again (a burst of steps is read once).
CHANGE_GAP_S = 0.02
RESUME_HELP = "Go on with an interrupted run of the store instead of submitting a workflow."


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


async def _start_run(
    session: EmbeddedSession,
    out: Console,
    prepared: Prepared | None,
    run_id: str | None,
    replay: ReplayRequest | None,
) -> str:
    """Submit the workflow, or go on with the run (replaying its failed units when asked);
    the run's id."""
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


def _print_header(
    out: Console, session: EmbeddedSession, store: Path, pool: LocalPool, plugins: tuple[str, ...]
) -> None:
    from simrun.local.start import held_line

    out.print(f"store    {escape(str(store))} (learned resources in simrun.db)")
    out.print(f"redis    {escape(session.redis_note)}")
    out.print(f"workers  {pool.text()} (logs in {escape(str(store / 'logs'))})")
    out.print(f"service  {session.url}")
    note = held_line(session.held, store, plugins)
    if note is not None:
        out.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)


def _report_ended(
    out: Console, end: FollowEnd, failures: list[FailureView], replay_cmd: str, store: Path
) -> int:
    """Print the end of a run that ended (its summary, what failed and how to replay it,
    where the learned resources are); its exit status."""
    code = report_end(
        out,
        end.run,
        failures,
        replay_cmd,
        str(StoreLayout(store).run_dir(end.run.id)),
        logs_where=["--store", str(store)],
    )
    learned = shell_join(["simrun", "resources", "--store", str(store)])
    out.print(f"[dim]what was learned for the next runs: {escape(learned)}[/]", soft_wrap=True)
    return code


def _report_stopped(out: Console, end: FollowEnd, resume_cmd: str) -> int:
    """Print why a run that did not end stopped, and how to go on with it; the exit status."""
    out.print(summary_table(end.run, now_s=time.time()))
    current = end.run.id
    if end.reason == "interrupted":
        out.print(f"[yellow]interrupted:[/] the workers are stopped; run {current} is kept.")
        out.print("go on with it:")
        out.print(f"  {resume_cmd}", markup=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    if end.reason == "stuck":
        out.print(f"[red]run {current} cannot go on:[/] {escape(end.detail)}")
        out.print("give the worker containers more memory and go on with it:")
        out.print(f"  {resume_cmd} --worker-memory-gb GIB", markup=False, soft_wrap=True)
        return EXIT_FAILED
    out.print(f"[red]the embedded session failed:[/] {escape(end.detail)}")
    out.print("the run is kept; once fixed, go on with it:")
    out.print(f"  {resume_cmd}", markup=False, soft_wrap=True)
    return EXIT_FAILED


async def embedded(
    options: LocalOptions,
    types: dict[str, TaskType],
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
    from simrun.local.session import EmbeddedSession
    from simrun.local.start import run_commands

    out, err = console(), err_console()
    store = options.store
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    session = EmbeddedSession(options, types)
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
            _print_header(out, session, store, pool, options.plugins)
            current = await _start_run(session, out, prepared, run_id, replay)
            page = dashboard_url(session.url, current)
            out.print(f"dashboard {page}", soft_wrap=True)
            problem = open_dashboard(page) if open_browser else None
            if problem is not None:
                err.print(f"[yellow]{escape(problem)}[/]", soft_wrap=True)
            replay_cmd, resume_cmd = run_commands(current, store, options.plugins)
            watch = f"simrun status {current} --url {session.url}"
            out.print(f"watch it from another shell: {watch}", soft_wrap=True)
            view = make_view(out, every_s)
            end = await session.follow(current, view, interrupted=interrupted, gap_s=CHANGE_GAP_S)
            if end.reason == "interrupted":
                err.print(
                    "[yellow]stopping: running units finish or are handed back "
                    f"(within {options.grace_s:g} s; Ctrl-C again to stop them now)[/]"
                )
            if end.reason != "ended":
                await session.drain()
            end = replace(end, run=await session.view(current))
            failures = await session.failures(current)
            if open_browser and end.reason == "ended":  # the end first, then the page
                code = _report_ended(out, end, failures, replay_cmd, store)
                out.print(f"the dashboard stays up at {page}: Ctrl-C to stop", soft_wrap=True)
                await interrupted.wait()
                return code
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if end.reason == "ended":
        return _report_ended(out, end, failures, replay_cmd, store)
    return _report_stopped(out, end, resume_cmd)


def _check_usage(
    workflow: Path | None,
    resume: str | None,
    dry_run: bool,
    overrides: tuple[SettingOverride, ...],
    reuse: bool,
    rerun: tuple[str, ...],
) -> None:
    if (workflow is None) == (resume is None):
        raise click.UsageError("give a WORKFLOW to run, or --resume RUN to go on with one")
    if resume is None:
        return
    if dry_run:
        raise click.UsageError("--dry-run needs a WORKFLOW (it forecasts a new run)")
    if overrides:
        raise click.UsageError("--set needs a WORKFLOW (a resumed run keeps its settings)")
    if rerun or not reuse:
        raise click.UsageError(
            "--rerun and --no-reuse need a WORKFLOW (a resumed run keeps its own)"
        )


def _prepare_and_forecast(
    out: Console,
    prepared: Prepared,
    types: dict[str, TaskType],
    pool: LocalPool,
    settings: LocalOptions,
    dry_run: bool,
) -> None:
    """Print the workflow's forecast on the pool; exit after it with ``dry_run``; else
    `LocalError` when the session cannot run one of its tasks."""
    from simrun.app.plans import reuse_forecasts, store_resolver, task_plans
    from simrun.cli.dryrun import dry_run_exit, print_forecast
    from simrun.core.forecast import pool_advice, pool_of
    from simrun.core.sizing import image_queue
    from simrun.local.machine import local_scratch_gb
    from simrun.local.session import image_problem, images_of
    from simrun.local.start import task_types_in

    doc, store = prepared.doc, settings.store
    engine_line = image_problem(task_types_in(prepared, types), settings.engine, doc.image)
    if engine_line is not None and not dry_run:
        raise LocalError(engine_line)
    reused = asyncio.run(reuse_forecasts(prepared, types, store))
    rows = asyncio.run(task_plans(doc, types, store_resolver(store), reused.whole, reused.units))
    name = f" ({doc.name})" if doc.name else ""
    model = f", model {doc.model!r}" if doc.model else ""
    out.print(f"{escape(prepared.source)}{name}: {_tasks(len(rows))}{model}")
    queues = ("cpu", "gpu", *(image_queue(i) for i in images_of(list(types.values()), doc.image)))
    room = local_scratch_gb(settings.scratch_dir or store)  # the workers' scratch
    caps = pool_of(pool.workers, pool.processes, pool.memory_gb, pool.gpus_per_worker, queues, room)
    result = print_forecast(out, rows, caps, pool.text())
    if dry_run and engine_line is not None:
        out.print(f"[red]{escape(engine_line)}[/]")
        sys.exit(EXIT_FAILED)
    if dry_run:
        sys.exit(dry_run_exit(out, result, "dry run: nothing was started, enqueued or written"))
    problems = [t for t in result.tasks if t.problem] if result is not None else []
    if problems:
        problem = problems[0].problem or ""
        raise LocalError(
            f"this pool cannot run task {problems[0].plan.name!r} ({problem}): "
            f"{pool_advice(problem)}"
        )


@click.command("run")
@click.argument("workflow", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click_options(LocalOptions)
@opt.SET
@opt.NO_REUSE
@opt.RERUN
@click.option("--dry-run", is_flag=True, help="Check, count and forecast; start nothing.")
@click.option("--resume", metavar="RUN", default=None, help=RESUME_HELP)
@opt.EVERY_S
@click.option(
    "--open", "open_browser", is_flag=True,
    help="Open the run's dashboard in the browser (and keep it up after the run, to Ctrl-C).",
)  # fmt: skip
def run(
    workflow: Path | None,
    settings: LocalOptions,
    overrides: tuple[SettingOverride, ...],
    reuse: bool,
    rerun: tuple[str, ...],
    dry_run: bool,
    resume: str | None,
    every_s: float,
    open_browser: bool,
) -> None:
    """Run WORKFLOW on this machine: Redis, the service and worker containers are started
    for the run and stopped after it, with live progress.

    Exits 0 when the run succeeded; otherwise 1 with the failed units and the command that
    retries them, or 130 after Ctrl-C (the run is kept: go on with --resume RUN).
    """
    _check_usage(workflow, resume, dry_run, overrides, reuse, rerun)
    from simrun.app.prepare import prepare
    from simrun.local import lock
    from simrun.local.session import local_engine
    from simrun.local.start import local_pool, ready_session

    lock.check_free(settings.store)  # before the plan: the lock's error is the first line
    types = load_types_from_here(settings.plugins)
    pool = local_pool(settings)  # the forecast's is the session's
    settings = replace(settings, engine=local_engine(settings.engine), go_on_with=resume)
    prepared: Prepared | None = None
    if workflow is not None:
        prepared = prepare(workflow, types, overrides=overrides, programs=True)
        prepared = replace(prepared, reuse=reuse, rerun=rerun)
        _prepare_and_forecast(console(), prepared, types, pool, settings, dry_run)
    options, _ = asyncio.run(ready_session(settings, types, prepared=prepared, pool=pool))
    code = embedded(
        options, types, pool, prepared=prepared, run_id=resume, every_s=every_s,
        open_browser=open_browser,
    )  # fmt: skip
    sys.exit(asyncio.run(code))
