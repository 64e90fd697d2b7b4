"""``simrun logs RUN [TASK [UNIT]] [--attempt N] [--follow]``: the kept logs of a run's units,
read from a store or asked of the service (where they live: `simrun.core.unitlogs`)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from simrun.cli.progress import logs_command
from simrun.cli.remote import Where, store_or_service
from simrun.core.unitlogs import (
    FAILED,
    LiveAttempt,
    LogNotFound,
    UnitAttempt,
    UnitLogHeader,
    UnitLogs,
    parse_unit,
    run_logs,
    store_live_unit_logs,
    store_unit_logs,
)

if TYPE_CHECKING:
    from simrun.client import Client
    from simrun.core.views import RunView

#: Seconds between two looks at a followed unit.
FOLLOW_POLL_S = 1.0
#: The states of a run that can still give a unit a new attempt.
_GOING = frozenset({"pending", "running"})
#: The states of a task that give none of its units a new attempt.
_TASK_OVER = frozenset({"done", "failed", "cancelled"})


@dataclass(frozen=True)
class LogSource:
    """Where the logs are read: a store (`store_source`) or a service (`service_source`)."""

    run_logs: Callable[[str, str | None], dict[str, list[UnitLogHeader]]]
    unit_logs: Callable[[str, str, int | str, int | None], UnitLogs]
    unit_live_logs: Callable[[str, str, int | str, dict[str, int]], list[LiveAttempt]]
    run_view: Callable[[str], RunView | None]

    def states(self, run: str, task: str) -> tuple[str | None, str | None]:
        """The state of run ``run`` and of its task ``task`` (None: not known)."""
        view = self.run_view(run)
        if view is None:
            return None, None
        return view.state, next((t.state for t in view.tasks if t.name == task), None)


def store_source(root: Path) -> LogSource:
    """The logs of a store of ``simrun run``, read from its files."""
    from simrun.local.reads import open_store_reader, store_db

    store_db(root)

    def run_view(run: str) -> RunView | None:
        async def read() -> RunView | None:
            async with open_store_reader(root) as reader:
                return await reader.run(run)

        return asyncio.run(read())

    return LogSource(
        functools.partial(run_logs, root),
        functools.partial(store_unit_logs, root),
        functools.partial(store_live_unit_logs, root),
        run_view,
    )


def service_source(client: Client) -> LogSource:
    """The logs a service serves (``GET /runs/{run}/logs...``)."""
    return LogSource(client.run_logs, client.unit_logs, client.unit_live_logs, client.run)


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def _unit_word(unit: int | str) -> str:
    return f"unit {unit}" if isinstance(unit, int) else unit


def listing_lines(
    found: dict[str, list[UnitLogHeader]], run: str, where: Sequence[str] = ()
) -> list[str]:
    """One line per unit with a log (its last attempt), failed first, with its command."""
    rows = [h for headers in found.values() for h in headers]
    if not rows:
        return [
            f"run {run}: no unit has a log yet (a unit keeps one when it printed something "
            "or did not end well)"
        ]
    rows.sort(key=lambda h: (h.outcome not in FAILED, h.task))
    return [_unit_line(h, run, where) for h in rows]


def _unit_line(h: UnitLogHeader, run: str, where: Sequence[str]) -> str:
    return (
        f"{h.task} {_unit_word(h.unit)}: attempt {h.attempt} {h.outcome} on {h.worker}"
        f" at {_when(h.finished)} · {logs_command(run, h.task, h.unit, where)}"
    )


def _follow_listing(
    source: LogSource,
    run: str,
    task: str | None,
    where: Sequence[str],
    echo: Callable[[str], None],
) -> None:
    """Print the listing's line of each unit attempt that kept a log as it ends, until the
    run (or ``task``) ends."""
    seen: set[tuple[str, int | str, int]] = set()
    said = False
    while True:
        run_state, task_state = source.states(run, task or "")
        if run_state is None:
            raise click.ClickException(f"no run {run}")
        over = run_state not in _GOING or (task is not None and task_state in _TASK_OVER)
        try:
            found = source.run_logs(run, task)
        except LogNotFound:
            found = {}  # its directory (or the task's) is not made yet
        new = [h for hs in found.values() for h in hs if (h.task, h.unit, h.attempt) not in seen]
        for h in sorted(new, key=lambda h: h.finished):
            seen.add((h.task, h.unit, h.attempt))
            echo(_unit_line(h, run, where))
        if over:
            ended = f"run {run} is {run_state}" if run_state not in _GOING else ""
            echo(ended or f"task {task} is {task_state}")
            return
        if not said:
            said = True
            echo(
                f"(following {'task ' + task if task else 'run ' + run}: a line per unit "
                "that prints something or does not end well, as it ends)"
            )
        time.sleep(FOLLOW_POLL_S)


def _header_lines(h: UnitLogHeader, of: int) -> list[str]:
    process = f"process {h.pid}" if h.pid is not None else "simrun-exec"
    limit = f" of {h.limit_gb:g} GiB" if h.limit_gb else ""
    return [
        f"=== {h.task} {_unit_word(h.unit)}, attempt {h.attempt} of {of}: {h.outcome} ===",
        f"worker {h.worker} · {process} · job {h.job_id}",
        f"memory: peak {h.peak_gb:.3f} GiB{limit} (the job's process)",
        f"job ran {_when(h.started)} → {_when(h.finished)} ({h.finished - h.started:.1f} s)"
        + (f"; the unit took {h.seconds:.3f} s" if h.seconds is not None else ""),
    ]


def _error_lines(h: UnitLogHeader) -> list[str]:
    if not h.error:
        return []
    return [
        "--- traceback ---" if "Traceback" in h.error else "--- error ---",
        h.error.rstrip("\n"),
    ]


def attempt_lines(attempt: UnitAttempt, of: int) -> list[str]:
    """The header, output and traceback of one attempt of a unit of ``of`` attempts."""
    output = attempt.output.rstrip("\n") if attempt.output else "(nothing printed)"
    return [
        *_header_lines(attempt.header, of),
        *(f"log: {path}" for path in attempt.log_paths),
        "--- output ---",
        output,
        *_error_lines(attempt.header),
    ]


class _Printer:
    """Prints what a follow reads: output as it comes (a heading per file), lines around it."""

    def __init__(self, echo: Callable[[str], None], write: Callable[[str], None]) -> None:
        self.echo, self.write = echo, write
        self.file: str | None = None
        self.open_line = False

    def output(self, name: str, text: str) -> None:
        if not text:
            return
        if name != self.file:
            self.close()
            self.echo(f"--- output ({name}) ---")
            self.file = name
        self.write(text)
        self.open_line = not text.endswith("\n")

    def close(self) -> None:
        if self.open_line:
            self.write("\n")
            self.open_line = False

    def lines(self, lines: list[str]) -> None:
        self.close()
        self.file = None
        for line in lines:
            self.echo(line)


def _live_attempts(
    source: LogSource, run: str, task: str, unit: int | str, offsets: dict[str, int]
) -> list[LiveAttempt]:
    try:
        return source.unit_live_logs(run, task, unit, offsets)
    except LogNotFound as exc:
        if source.states(run, task)[0] is None:
            raise click.ClickException(str(exc)) from None
        return []  # a run of the store whose directory is not there yet


class _UnitAttempts:
    """What a follow of one unit printed of its attempts, and where it is in their files."""

    def __init__(self, task: str, unit: int | str, printer: _Printer) -> None:
        self.task, self.unit, self.printer = task, unit, printer
        self.offsets: dict[str, int] = {}
        self.started: set[int] = set()
        self.ended: set[int] = set()

    def show(self, attempts: list[LiveAttempt]) -> bool:
        """Print what is new of ``attempts``; whether one of them ended well."""
        for attempt in attempts:
            if attempt.attempt not in self.ended and self._show(attempt, len(attempts)):
                return True
        return False

    def _show(self, attempt: LiveAttempt, of: int) -> bool:
        n, header = attempt.attempt, attempt.header
        if n not in self.started:
            self.started.add(n)
            if header is None:
                self.printer.lines(
                    [f"=== {self.task} {_unit_word(self.unit)}, attempt {n}: running ==="]
                )
        for chunk in attempt.chunks:
            self.printer.output(chunk.name, chunk.text)
            self.offsets[chunk.name] = chunk.offset
        if header is None:
            return False
        self.ended.add(n)
        if not any(self.offsets.get(c.name) for c in attempt.chunks):
            self.printer.lines(["(nothing printed)"])
        self.printer.lines([*_header_lines(header, of), *_error_lines(header)])
        return header.outcome == "done"


def _follow(
    source: LogSource,
    run: str,
    task: str,
    unit: int | str,
    echo: Callable[[str], None],
) -> None:
    """Print the unit's attempts as they run (output as written, header and traceback once
    ended) until one ends well, or the task or the run ends."""
    printer = _Printer(echo, lambda text: click.echo(text, nl=False))
    shown = _UnitAttempts(task, unit, printer)
    waiting_said = False
    while True:
        attempts = _live_attempts(source, run, task, unit, shown.offsets)
        if shown.show(attempts):
            return
        run_state, task_state = source.states(run, task)
        live = any(a.header is None for a in attempts)
        if run_state not in _GOING or (task_state in _TASK_OVER and not live):
            printer.close()
            if not attempts:
                ended = f"run {run} is {run_state or 'unknown'}"
                what = f"task {task} is {task_state}" if run_state in _GOING else ended
                echo(f"{what}: {_unit_word(unit)} left no log")
            return
        if not waiting_said and not attempts:
            echo(f"(following {task} {_unit_word(unit)}: its output appears as it is written)")
            waiting_said = True
        time.sleep(FOLLOW_POLL_S)


def show_logs(
    source: LogSource,
    run: str,
    task: str | None,
    unit: str | None,
    attempt: int | None,
    follow: bool,
    where: Sequence[str] = (),
    echo: Callable[[str], None] = click.echo,
) -> None:
    """What ``simrun logs`` prints, from ``source``."""
    if follow and unit is None:
        _follow_listing(source, run, task, where, echo)
        return
    if unit is None or task is None:
        for line in listing_lines(source.run_logs(run, task), run, where):
            echo(line)
        return
    try:
        key = parse_unit(unit)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="UNIT") from exc
    if follow:
        _follow(source, run, task, key, echo)
        return
    everything = source.unit_logs(run, task, key, None)
    found = source.unit_logs(run, task, key, attempt) if attempt is not None else everything
    for one in found.attempts:
        for line in attempt_lines(one, len(everything.attempts)):
            echo(line)


@click.command("logs")
@click.argument("run_id", metavar="RUN")
@click.argument("task", required=False)
@click.argument("unit", required=False)
@click.option(
    "--attempt", type=click.IntRange(min=1), default=None, help="Only this attempt of UNIT."
)
@click.option(
    "--follow",
    is_flag=True,
    help="Print UNIT's output as it is written, attempt after attempt, until one ends well "
    "or its task or the run ends; without UNIT, a line per unit log of the run (or TASK) "
    "as it ends, until it ends.",
)
@store_or_service("Read the store of `simrun run` here instead of asking a service.")
def logs(
    run_id: str,
    task: str | None,
    unit: str | None,
    attempt: int | None,
    follow: bool,
    where: Where,
) -> None:
    """Show the kept logs of RUN's units: the units with a log (those that printed
    something or did not end well, failed first), or TASK's, or UNIT's attempts with their
    worker, process, memory, times, output and traceback.

    A unit keeps a log when it printed something or did not end well. The logs are read
    from --store; without it and without --url, from ./simrun-store (SIMRUN_STORE) when it
    is a store; else from the service.
    """
    if attempt is not None and unit is None:
        raise click.UsageError("--attempt needs a TASK and a UNIT")
    if attempt is not None and follow:
        raise click.UsageError("--follow prints every attempt; leave out --attempt")
    if where.store is not None:
        show_logs(store_source(where.store), run_id, task, unit, attempt, follow, where.args())
        return
    with where.service() as client:
        show_logs(service_source(client), run_id, task, unit, attempt, follow, where.args())
