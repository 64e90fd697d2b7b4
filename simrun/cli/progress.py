"""Showing a run from its view (`simrun.core.views.RunView`): a live display on a terminal,
plain lines elsewhere (CI logs, pipes), how it ended (`report_end`). The formatting and
rows are plain functions; `LiveView` and `PlainView` thin shells over rich."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from simrun.core.eta import pace_rate, task_eta_s
from simrun.core.reuse import reused_text, units_reused_text
from simrun.core.states import (
    ACTIVE_TASK_STATES,
    ACTIVE_UNIT_STATES,
    FINISHED_TASK_STATES,
    TaskPhase,
)
from simrun.core.views import FailureView, RunView, TaskView, running_seconds

if TYPE_CHECKING:
    from simrun.app.follow import ProgressView

#: Failed units listed at most at the end of a run (the rest are counted).
MAX_FAILURES_SHOWN = 20


def format_duration(seconds: float | None) -> str:
    """``—`` when unknown, else ``<1 s``, ``42 s``, ``3 min 05 s``, ``2 h 07 min``, ``3 d 4 h``."""
    if seconds is None:
        return "—"
    s = max(0.0, float(seconds))
    if s < 1:
        return "<1 s"
    whole = round(s)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = whole // 60
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    hours = minutes // 60
    return f"{hours // 24} d {hours % 24} h"


def peak_text(host_gb: float | None, gpu_gb: float | None) -> str:
    """The peak memory of a task: per process, and on its GPUs when measured."""
    if gpu_gb is None:
        return format_gb(host_gb)
    return f"{format_gb(host_gb)} (GPU {format_gb(gpu_gb)})"


def format_gb(gb: float | None) -> str:
    """Memory for people: ``—``, ``512 MiB`` below a GiB, else ``1.5 GiB``."""
    if gb is None:
        return "—"
    if gb < 1:
        return f"{max(1, round(gb * 1024))} MiB"
    return f"{gb:.3g} GiB" if gb < 100 else f"{gb:.0f} GiB"


def format_rate(seconds_per_unit: float | None) -> str:
    """Seconds per unit for people: ``learning`` while unknown."""
    if seconds_per_unit is None:
        return "learning"
    if seconds_per_unit < 0.01:
        return f"{seconds_per_unit * 1000:.2g} ms/unit"
    return f"{seconds_per_unit:.3g} s/unit"


def guess_eta(
    total: int | None, done: int, failed: int, started_s: float | None, now_s: float | None
) -> float | None:
    """Seconds left at the task's pace so far (`simrun.core.eta` with nothing learned);
    None before its first unit finished."""
    if total is None:
        return None
    finished = done + failed
    return task_eta_s(max(0, total - finished), None, 0, pace_rate(finished, started_s, now_s))


def task_eta(task: TaskView, now_s: float | None = None) -> tuple[float | None, bool]:
    """A task's ETA and whether it is guessed: the view's (the service's), else, with
    ``now_s``, for an active task that learned nothing yet, its pace so far."""
    if task.eta_s is not None or task.seconds_per_unit is not None:
        return task.eta_s, False
    if task.state not in ACTIVE_TASK_STATES:
        return None, False
    taken = task.units_reused  # done, but not at this pace
    total = None if task.units is None else task.units - taken
    eta = guess_eta(total, task.count("done") - taken, task.count("failed"), task.started_s, now_s)
    return eta, eta is not None


def _eta_text(task: TaskView, now_s: float | None) -> str:
    eta, guessed = task_eta(task, now_s)
    text = format_duration(eta)
    return f"~{text}" if guessed and not text.startswith("<") else text


def _units_reused(task: TaskView) -> str:
    """``N units reused from RUN`` of a task that took some units, else empty."""
    if not task.units_reused or not task.units_reused_from:
        return ""
    return units_reused_text(task.units_reused, task.units_reused_from)


def _state_text(task: TaskView) -> str:
    state = _bare_state_text(task)
    reused = _units_reused(task)
    return f"{state} · {reused}" if reused else state


def _bare_state_text(task: TaskView) -> str:
    if task.state == "done" and task.reused_from:
        return reused_text(task.reused_from)
    if task.state == "merging" or (task.merge in ACTIVE_UNIT_STATES and task.state != "done"):
        return "merging"
    if task.state in ("blocked", "failed") and task.status:
        return f"{task.state}: {task.status}"
    if task.state == "running" and task.phase == TaskPhase.PROBING:
        return task.status
    return task.state


def _units_text(task: TaskView) -> str:
    return "—" if task.units is None else f"{task.count('done')}/{task.units}"


def run_header(run: RunView, elapsed_s: float | None = None) -> str:
    """The first line of a run's display: id, name, state, time so far, ETA."""
    name = f" ({run.name})" if run.name else ""
    parts = [f"run {run.id}{name}: {run.state}"]
    if elapsed_s is not None:
        parts.append(f"elapsed {format_duration(elapsed_s)}")
    if run.state == "running" and run.eta_s is not None:
        parts.append(f"ETA {format_duration(run.eta_s)}")
    elif run.message:
        parts.append(run.message)
    return " · ".join(parts)


def plain_lines(run: RunView, only_active: bool = True, now_s: float | None = None) -> list[str]:
    """One line per task for logs: ``sweep: 10/24 done, 2 running, 4 queued, 0 failed ·
    0.31 s/unit · ETA 4 s · running``; with ``only_active``, only the tasks with units on
    the way. An ETA with ``~`` is guessed (`task_eta`)."""
    out = []
    for task in run.tasks:
        if only_active and task.state not in ACTIVE_TASK_STATES:
            continue
        if task.state == "waiting":
            out.append(f"{task.name}: waiting for its inputs")
            continue
        if task.reused_from:
            out.append(f"{task.name}: {_state_text(task)}")
            continue
        parts = [f"{_units_text(task)} done"]
        finished = task.state in FINISHED_TASK_STATES
        if not finished:
            parts += [f"{task.count('running')} running", f"{task.count('queued')} queued"]
        parts.append(f"{task.count('failed')} failed")
        if task.kills:
            parts.append(f"{task.kills} killed for memory")
        text = f"{task.name}: {', '.join(parts)}"
        if not finished:
            text += f" · {format_rate(task.seconds_per_unit)} · ETA {_eta_text(task, now_s)}"
        out.append(f"{text} · {_state_text(task)}")
    return out


def render_live(run: RunView, elapsed_s: float | None = None, now_s: float | None = None) -> Group:
    """The live display: a header and one bar per task."""
    table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for column in ("task", "progress", "units", "failed", "killed", "speed", "ETA", "state"):
        left = column in ("task", "progress", "state")
        table.add_column(column, justify="left" if left else "right", no_wrap=column != "state")
    for task in run.tasks:
        done = task.count("done") if task.units else (1 if task.state == "done" else 0)
        failed = task.count("failed")
        table.add_row(
            task.name,
            ProgressBar(total=task.units or 1, completed=done, width=28),
            _units_text(task),
            Text(str(failed), style="red" if failed else ""),
            Text(_kills_text(task), style="yellow" if task.kills else ""),
            _speed_text(task),
            _eta_text(task, now_s) if task.state not in FINISHED_TASK_STATES else "",
            Text(_state_text(task), style=_STATE_STYLES.get(task.state, "")),
        )
    return Group(Text(run_header(run, elapsed_s), style="bold"), table)


def _speed_text(task: TaskView) -> str:
    finished = task.state in FINISHED_TASK_STATES
    if task.state == "waiting" or (finished and not task.seconds_per_unit):
        return ""
    return format_rate(task.seconds_per_unit)


def _kills_text(task: TaskView) -> str:
    return "—" if task.kills is None else str(task.kills)


_STATE_STYLES = {"done": "green", "failed": "red", "blocked": "yellow", "cancelled": "red"}


def task_seconds(
    task: TaskView,
    now_s: float | None = None,
    pauses: Sequence[tuple[float, float | None]] = (),
) -> float | None:
    """How long a task took: start to end, or to ``now_s`` while it has units on the way,
    less the run's ``pauses`` (`running_seconds`); None when the view does not tell."""
    started, finished = task.started_s, task.finished_s
    if started is None:
        return None
    if finished is None:
        if now_s is None or task.state not in ACTIVE_TASK_STATES:
            return None
        finished = now_s
    return running_seconds(started, finished, pauses)


def summary_rows(run: RunView, now_s: float | None = None) -> list[tuple[str, ...]]:
    """Per task the cells of `SUMMARY_COLUMNS` (time so far with ``now_s``; the memory
    requested: the largest its units ran under, else its last request)."""
    rows: list[tuple[str, ...]] = []
    for task in run.tasks:
        requested = task.requested_gb
        if requested is None:
            requested = (task.resources or {}).get("memory_per_worker_gb")
        rows.append(
            (
                task.name,
                _summary_units(task),
                format_duration(task_seconds(task, now_s, run.pauses)),
                format_gb(requested),
                peak_text(task.peak_memory_gb, task.peak_gpu_memory_gb),
                _kills_text(task),
                staged_text(task),
                scratch_text(task),
                task.out or "—",
            )
        )
    return rows


def staged_text(task: TaskView) -> str:
    """What staging a task's inputs took: "12.5 MiB in 0.30 s", or "—" for none."""
    if not task.staged_bytes and not task.staged_s:
        return "—"
    took = "<0.01 s" if task.staged_s < 0.01 else f"{task.staged_s:.2f} s"
    return f"{format_bytes(task.staged_bytes)} in {took}"


def scratch_text(task: TaskView) -> str:
    """The most local scratch a task used, against what it asked for: "410 MiB of 2 GiB",
    "3.1 GiB, over 2 GiB asked", or "—" when not measured (or nothing used, nothing asked)."""
    peak = task.scratch_peak_gb
    if peak is None:
        return "—"
    asked = float((task.resources or {}).get("scratch_gb") or 0.0)
    if asked <= 0:
        return format_gb(peak) if peak > 0 else "—"
    if peak > asked:
        return f"{format_gb(peak)}, over {format_gb(asked)} asked"
    return f"{format_gb(peak)} of {format_gb(asked)}"


def format_bytes(size: int) -> str:
    """A size in bytes as text with a binary unit: "512 B", "1.5 MiB"."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _summary_units(task: TaskView) -> str:
    if task.reused_from:
        return reused_text(task.reused_from)
    if not task.splittable:
        return "command"
    reused = _units_reused(task)
    return f"{_units_text(task)}, {reused}" if reused else _units_text(task)


SUMMARY_COLUMNS = ("task", "units", "time", "memory/process", "peak/process", "kills",
                   "staged", "scratch", "outputs")  # fmt: skip


def summary_table(run: RunView, now_s: float | None = None) -> Table:
    """The table of a run's tasks (printed when it ended, and by ``simrun status``),
    without the columns the view says nothing of."""
    rows = summary_rows(run, now_s)
    keep = [i for i in range(len(SUMMARY_COLUMNS)) if any(row[i] != "—" for row in rows)]
    table = Table(title=None, show_lines=False)
    for i in keep:
        table.add_column(SUMMARY_COLUMNS[i], overflow="fold")
    for row in rows:
        table.add_row(*(escape(row[i]) for i in keep))
    return table


def error_line(error: str | None) -> str:
    """The last non-empty line of a traceback or message (the exception itself)."""
    for line in reversed((error or "").splitlines()):
        if line.strip():
            return line.strip()
    return "failed without a message"


def logs_command(run: str, task: str, unit: int | str, where: Sequence[str] = ()) -> str:
    """The ``simrun logs`` command of a unit (``where``: its ``--store DIR`` or ``--url``)."""
    from simrun.cli.common import shell_join

    return shell_join(["simrun", "logs", run, task, str(unit), *where])


def failure_lines(
    failures: Sequence[FailureView],
    limit: int = MAX_FAILURES_SHOWN,
    run: str | None = None,
    where: Sequence[str] = (),
) -> list[str]:
    """``task 'sweep', unit 3: RuntimeError: boom`` per failed unit, at most ``limit`` and a
    count of the others; with ``run``, each followed by its `logs_command`."""
    lines = []
    for f in failures[:limit]:
        what = f"unit {f.unit}" if isinstance(f.unit, int) else f.unit
        lines.append(f"task {f.task!r}, {what}: {error_line(f.error)}")
        if run is not None:
            lines.append(f"  traceback and output: {logs_command(run, f.task, f.unit, where)}")
    if len(failures) > limit:
        lines.append(f"… and {len(failures) - limit} more")
    return lines


def report_end(
    out: Console,
    run: RunView,
    failures: Sequence[FailureView],
    replay: str,
    outputs: str | None = None,
    logs_where: Sequence[str] | None = None,
) -> int:
    """Print how a run ended: the summary; where its outputs are, or its failed units (each
    with its `logs_command` given ``logs_where``) and ``replay``, the command that retries
    them. The exit status (0 when it succeeded)."""
    out.print(summary_table(run))
    took = format_duration(
        running_seconds(run.created_s, run.finished_s or run.updated_s, run.pauses)
    )
    if run.state == "succeeded":
        where = f" · outputs in {escape(outputs)}" if outputs else ""
        out.print(f"[bold green]run {run.id} succeeded[/] in {took}{where}")
        return 0
    message = f": {escape(run.message)}" if run.message else ""
    out.print(f"[bold red]run {run.id} {run.state}[/]{message}")
    run_id = run.id if logs_where is not None else None
    for line in failure_lines(failures, run=run_id, where=logs_where or ()):
        out.print(f"  {line}", markup=False, soft_wrap=True)
    if failures:
        out.print("fix the cause, then retry the failed units (the done ones are kept):")
        out.print(f"  {replay}", markup=False, soft_wrap=True)
    return 1


class LiveView:
    """A live display on a terminal, refreshed by `update`."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self._live = Live(console=console, refresh_per_second=4, transient=False)
        self._live.start()

    def update(self, run: RunView) -> None:
        elapsed = time.monotonic() - self.started
        self._live.update(render_live(run, elapsed, time.time()), refresh=True)

    def close(self) -> None:
        self._live.stop()


class PlainView:
    """Plain lines for logs: one when a task changes state, and the progress of the active
    tasks every ``every_s`` seconds."""

    def __init__(self, console: Console, every_s: float = 10.0) -> None:
        self.console = console
        self.every_s = every_s
        self.started = time.monotonic()
        self._last_print = -float("inf")
        self._states: dict[str, str] = {}

    def _echo(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.console.print(f"[{format_duration(elapsed):>9}] {text}", markup=False, highlight=False)

    def update(self, run: RunView) -> None:
        for task in run.tasks:
            if self._states.get(task.name) != task.state:
                if task.reused_from:
                    self._echo(f"{task.name}: {_state_text(task)}")
                elif task.name in self._states or task.state != "waiting":
                    self._echo(f"{task.name}: {_state_text(task)} ({_units_text(task)} units)")
                self._states[task.name] = task.state
        now = time.monotonic()
        if now - self._last_print >= self.every_s:
            if self._last_print > -float("inf"):  # the first look is told by the lines above
                for text in plain_lines(run, now_s=time.time()):
                    self._echo(text)
            self._last_print = now

    def close(self) -> None:
        """Nothing to undo: every line is printed already."""


def make_view(console: Console, every_s: float = 10.0) -> ProgressView:
    """A live display on a terminal, else plain lines."""
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveView(console)
    return PlainView(console, every_s)
