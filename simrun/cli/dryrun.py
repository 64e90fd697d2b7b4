"""``--dry-run``'s output: each task's plan and the forecast on the pool
(`simrun.app.plans` makes the plans, `simrun.core.forecast` the forecast)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from simrun.app.plans import DryRow
from simrun.cli.progress import format_duration, format_gb, format_rate
from simrun.cli.tables import table
from simrun.core.forecast import Forecast, TaskForecast, forecast
from simrun.core.sizing import WorkerCapacity

COLUMNS = ("task", "type", "units", "queue", "memory/process", "resources from", "speed",
           "core-h", "peak", "ETA")  # fmt: skip
#: The exit status of a dry run that found a task the pool cannot run (usable in CI).
CANNOT_RUN_EXIT = 2


def _units_cell(row: DryRow) -> str:
    """The units a task would run (and those it would take, ``+N reused``)."""
    assert row.plan is not None
    if row.plan.kind == "command":
        return "command"
    text = "?" if row.plan.units is None else f"{row.plan.units:,}"
    return f"{text} (+{row.units_reused:,} reused)" if row.units_reused else text


def _hours(value: float | None) -> str:
    if value is None:
        return "—"
    if 0 < value < 0.01:
        return "<0.01"
    return f"{value:.2g}" if value < 1 else f"{value:,.1f}"


def _cells(row: DryRow, f: TaskForecast | None) -> tuple[str, ...]:
    p = row.plan
    if p is None:
        unknown = "—" if row.reused is not None else "?"
        blank = "" if row.reused is not None else "?"
        return (row.name, row.type, unknown, blank, blank, row.note, "", "", "", "")
    queue = f"{p.queue} ({p.gpus} GPU)" if p.gpus else p.queue
    return (
        p.name,
        p.type,
        _units_cell(row),
        queue,
        format_gb(p.memory_per_worker_gb),
        p.source,
        format_rate(p.seconds_per_unit),
        _hours(f.core_hours) if f else "—",
        format_gb(f.peak_memory_gb) if f else "—",
        format_duration(f.eta_s) if f else "—",
    )


def _table(rows: Sequence[DryRow], result: Forecast | None) -> Table:
    by_name = {t.plan.name: t for t in result.tasks} if result is not None else {}
    cells = [_cells(row, by_name.get(row.name)) for row in rows]
    return table(COLUMNS, cells, left=("task", "type", "resources from"))


def _reuse_lines(rows: Sequence[DryRow]) -> list[str]:
    lines = []
    reused = [r for r in rows if r.reused is not None]
    if reused:
        lines.append(
            f"reused: {', '.join(f'{r.name} (from {r.reused})' for r in reused)}; "
            "the forecast counts the rest (--rerun TASK or --no-reuse to run them)"
        )
    partly = [r for r in rows if r.units_reused and r.units_from is not None]
    if partly:
        lines.append(
            f"units reused: {', '.join(f'{r.name} ({r.note})' for r in partly)}; "
            "the forecast counts the units that run and the merge"
        )
    return lines


def _eta_text(rows: Sequence[DryRow], result: Forecast) -> str:
    if any(r.plan is None and r.reused is None for r in rows):
        return "unknown: some task types are not installed here"
    if result.eta_s is None:
        return "unknown until the seconds per unit are learned (after a first run)"
    return format_duration(result.eta_s)


def print_forecast(
    out: Console,
    rows: Sequence[DryRow],
    pool: Sequence[WorkerCapacity] | None,
    pool_text: str,
) -> Forecast | None:
    """Print the tasks, their resources and the forecast on ``pool`` (None: unknown); the
    forecast when there is a pool."""
    plans = [r.plan for r in rows if r.plan is not None]
    result = forecast(plans, pool) if pool is not None else None
    out.print(_table(rows, result))
    out.print()
    for line in _reuse_lines(rows):
        out.print(line)
    out.print(f"pool: {pool_text}")
    if result is None:
        out.print("forecast: no pool known (give one: --workers, --processes, --worker-memory-gb)")
        return None
    if not result.tasks and any(r.reused is not None for r in rows):
        out.print("forecast: nothing to run, every task reuses earlier work")
        return result
    out.print(
        f"forecast: {_hours(result.core_hours)} core-hours, peak memory "
        f"{format_gb(result.peak_memory_gb)}, ETA {_eta_text(rows, result)}"
    )
    for t in result.tasks:
        if t.problem is not None:
            out.print(f"[yellow]task {t.plan.name!r} cannot run on this pool: {t.problem}[/]")
    return result


def dry_run_exit(out: Console, result: Forecast | None, nothing: str) -> int:
    """Print the dry run's last line (``nothing``: what was not done) and return its exit
    status: `CANNOT_RUN_EXIT` when a task cannot run on the pool, else 0."""
    stuck = [t.plan.name for t in result.tasks if t.problem is not None] if result else []
    out.print(nothing)
    if stuck:
        names = ", ".join(repr(n) for n in stuck)
        out.print(f"dry run failed: the pool cannot run {names} (exit {CANNOT_RUN_EXIT})")
        return CANNOT_RUN_EXIT
    return 0
