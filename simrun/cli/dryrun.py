"""``--dry-run``: what each task of a workflow would be dispatched with, and the forecast,
before anything is enqueued or written.

Units are counted here (``count_units`` in a thread) for the task types installed locally;
resources are resolved from a store's ``simrun.db`` (embedded mode, opened only when it
exists) or from a service's ``/resources``. The arithmetic is `simrun.cli.forecast`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from simrun.cli.common import Prepared
from simrun.cli.forecast import Forecast, TaskPlan, forecast
from simrun.cli.progress import format_duration, format_gb, format_rate
from simrun.core.layout import StoreLayout
from simrun.core.reuse import (
    Earlier,
    UnitsEarlier,
    best_units,
    choose,
    choose_units,
    forced_tasks,
    rerun_problems,
    reused_text,
    task_all_fingerprints,
    units_present,
    units_reused_text,
)
from simrun.core.sizing import WorkerCapacity, queue_name
from simrun.plugins import ResourceHint, TaskType, UnitOutputs, count_units, unit_outputs
from simrun.resources import ResolvedResources, ResourceKey, ResourceStore, resource_key
from simrun.resources.policy import decide
from simrun.runstore.reads import (
    DoneTask,
    done_in_file,
    done_ranges_in_file,
    done_units_in_file,
)
from simrun.workflow import Problem, ResourceOverride, Workflow, WorkflowError, source_paths

#: The resources of a task: (its type, its settings, the run's model, its override).
Resolver = Callable[
    [TaskType, Mapping[str, Any], str, ResourceOverride | None], Awaitable[ResolvedResources]
]


@dataclass(frozen=True)
class DryRow:
    """One task of a dry run: its plan, or why there is none here."""

    name: str
    type: str
    plan: TaskPlan | None
    note: str = ""
    #: The earlier run whose work it reuses (it will not run).
    reused: str | None = None
    #: How many of its units it would take from the run ``units_from`` (its plan counts
    #: the others only).
    units_reused: int = 0
    units_from: str | None = None


#: Resources of a task from its key: (the key, its type's hint, its override).
KeyResolver = Callable[
    [ResourceKey, ResourceHint, ResourceOverride | None], Awaitable[ResolvedResources]
]


def _by_key(resolve_key: KeyResolver) -> Resolver:
    """A `Resolver` that resolves the resource key of a task with ``resolve_key``."""

    async def resolve(
        task_type: TaskType,
        settings: Mapping[str, Any],
        model: str,
        override: ResourceOverride | None,
    ) -> ResolvedResources:
        return await resolve_key(resource_key(task_type, settings, model), task_type.hint, override)

    return resolve


def store_resolver(store: Path) -> Resolver:
    """Resolve as the embedded service would, from ``store/simrun.db``; the hint (or the
    override) alone when the file does not exist, which is then not created."""
    db = StoreLayout(store).db
    if db.is_file():
        return _by_key(ResourceStore(db, keep_open=False).resolve)

    async def hint_only(
        _key: ResourceKey, hint: ResourceHint, override: ResourceOverride | None
    ) -> ResolvedResources:
        return decide([], hint, override)

    return _by_key(hint_only)


def summaries_resolver(summaries: Sequence[Mapping[str, Any]]) -> Resolver:
    """Resolve from a service's ``/resources`` rows (what it learned per key)."""
    from simrun.cli.forecast import resolved_from_summary

    by_key = {str(row["key"]): row for row in summaries}

    async def from_summary(
        key: ResourceKey, hint: ResourceHint, override: ResourceOverride | None
    ) -> ResolvedResources:
        return resolved_from_summary(by_key.get(key.text()), hint, override)

    return _by_key(from_summary)


@dataclass(frozen=True)
class UnitSource:
    """Where a task could take units from (reuse per unit): the earlier run, the out
    directory of its task, how many units it had, what the type declares, and the units
    done there (None: all, a done task)."""

    run: str
    out: Path
    units: int
    declared: UnitOutputs
    done: tuple[range, ...] | None = None

    def reusable(self, count: int) -> list[range]:
        """The units of a task of ``count`` units it would take now
        (`simrun.core.reuse.units_present`: blocking I/O, nothing written)."""
        return units_present(self.out, self.declared, count, self.units, self.done)


@dataclass(frozen=True)
class ReuseForecast:
    """What the tasks of a dry run would reuse: ``whole`` task → the run it takes its
    outputs from; ``units`` task → where it could take units from, to try in order (its
    count decides how many, `task_plans`)."""

    whole: dict[str, str]
    units: dict[str, tuple[UnitSource, ...]]


async def reuse_forecast(
    prepared: Prepared, types: Mapping[str, TaskType], store: Path
) -> dict[str, str]:
    """The tasks of ``prepared`` that would reuse the work of an earlier run of ``store``
    (its ``simrun.db`` read, never written), each with that run: the service's decision
    (`simrun.core.reuse.choose`) on what the store holds now. `WorkflowError` when
    ``--rerun`` names no task; none when a type is not installed here."""
    return (await reuse_forecasts(prepared, types, store)).whole


async def reuse_forecasts(
    prepared: Prepared, types: Mapping[str, TaskType], store: Path
) -> ReuseForecast:
    """`reuse_forecast`, and the tasks that reuse no earlier task whole but could take
    units of one (`simrun.core.reuse.choose_units`, as the service decides)."""
    doc = prepared.doc
    names = [spec.name for spec in doc.tasks]
    problems = rerun_problems(names, prepared.rerun)
    if problems:
        raise WorkflowError([Problem(("rerun",), why) for why in problems], "workflow")
    if not prepared.reuse or any(spec.type not in types for spec in doc.tasks):
        return ReuseForecast({}, {})
    layout = StoreLayout(store)
    sources = await asyncio.to_thread(source_paths, doc, prepared.base)
    prints, unit_prints = await asyncio.to_thread(
        task_all_fingerprints,
        doc.order(),
        {
            t.name: (doc.in_run_image(types[t.type]), prepared.settings[t.name], t.inputs)
            for t in doc.tasks
        },
        sources,
    )
    forced = forced_tasks(doc.dependencies(), prepared.rerun, prepared.reuse)
    done = await done_in_file(layout.db, sorted(set(prints.values())))

    def present(same: Sequence[DoneTask]) -> list[bool]:
        return [layout.task_out(d.run, d.task).is_dir() for d in same]

    found: dict[str, str] = {}
    for name, fingerprint in prints.items():
        same = [d for d in done if d.fingerprint == fingerprint]
        shown = await asyncio.to_thread(present, same)
        earlier = [Earlier(d.run, d.finished_s, p) for d, p in zip(same, shown, strict=True)]
        run = choose(name in forced, earlier)
        if run is not None:
            found[name] = run
    wanted = {n: u for n, u in unit_prints.items() if n not in found and n not in forced}
    done_units = await done_units_in_file(layout.db, sorted(set(wanted.values())))
    units: dict[str, tuple[UnitSource, ...]] = {}
    for name, unit_print in wanted.items():
        declared = unit_outputs(types[doc.task(name).type])
        earlier_units = choose_units(
            False,
            [
                UnitsEarlier(d.run, d.task, d.finished_s, d.units, d.state == "done")
                for d in done_units
                if d.unit_fingerprint == unit_print
            ],
        )
        if earlier_units and declared is not None:
            units[name] = tuple(
                [
                    UnitSource(
                        e.run,
                        layout.task_out(e.run, e.task),
                        e.units,
                        declared,
                        None
                        if e.done
                        else tuple(await done_ranges_in_file(layout.db, e.run, e.task)),
                    )
                    for e in earlier_units
                ]
            )
    return ReuseForecast(found, units)


async def task_plans(
    doc: Workflow,
    types: Mapping[str, TaskType],
    resolve: Resolver,
    reused: Mapping[str, str] | None = None,
    units_from: Mapping[str, Sequence[UnitSource]] | None = None,
) -> list[DryRow]:
    """Each task of ``doc`` in the order it runs, with its units and resources; the units
    of all tasks are counted at once, each in a thread. A task of ``reused`` (task → the
    run whose work it reuses, `reuse_forecast`) has no plan: it will not run; one of
    ``units_from`` (`reuse_forecasts`) plans the units it would not take only.
    `WorkflowError` names a task whose ``count_units`` failed."""
    positions = {spec.name: i for i, spec in enumerate(doc.tasks)}
    dependencies = doc.dependencies()
    reused = reused or {}
    units_from = units_from or {}

    async def one(name: str) -> DryRow:
        spec = doc.task(name)
        task_type = types.get(spec.type)
        if name in reused:
            return DryRow(name, spec.type, None, reused_text(reused[name]), reused=reused[name])
        if task_type is None:
            return DryRow(name, spec.type, None, f"type {spec.type!r} is not installed here")
        parsed = task_type.settings.model_validate(spec.settings)
        settings = json.loads(parsed.model_dump_json())
        units = 1
        if task_type.splittable:
            try:
                units = await asyncio.to_thread(count_units, task_type, settings)
            except Exception as exc:  # plugin code may raise anything: name the task
                raise WorkflowError(
                    [
                        Problem(
                            ("tasks", positions[name], "settings"),
                            f"count_units failed: {type(exc).__name__}: {exc}",
                            task=name,
                        )
                    ],
                    "dry run",
                ) from exc
        taken, source = 0, None
        if task_type.splittable and units_from.get(name):
            options = [(c, await asyncio.to_thread(c.reusable, units)) for c in units_from[name]]
            best = best_units(options)
            if best is not None:
                source, taken = best[0], sum(len(r) for r in best[1])
        resolved = await resolve(task_type, settings, doc.model, spec.resources)
        plan = TaskPlan(
            name=name,
            type=spec.type,
            kind="chunk" if task_type.splittable else "command",
            units=units - taken,
            queue=queue_name(
                task_type.image if task_type.image is not None else doc.image, resolved.gpus
            ),
            memory_base_gb=resolved.memory_base_gb,
            memory_per_worker_gb=resolved.memory_per_worker_gb,
            gpus=resolved.gpus,
            seconds_per_unit=resolved.seconds_per_unit,
            source=resolved.source,
            uses_cores=task_type.uses_cores,
            depends=tuple(sorted(d for d in dependencies[name] if d not in reused)),
            scratch_gb=resolved.scratch_gb,
        )
        if taken and source is not None:
            note = units_reused_text(taken, source.run)
            return DryRow(name, spec.type, plan, note, units_reused=taken, units_from=source.run)
        return DryRow(name, spec.type, plan)

    return list(await asyncio.gather(*(one(name) for name in doc.order())))


def _units_cell(plan: TaskPlan, row: DryRow) -> str:
    """The units a task would run (and those it would take, ``+N reused``)."""
    if plan.kind == "command":
        return "command"
    text = "?" if plan.units is None else f"{plan.units:,}"
    return f"{text} (+{row.units_reused:,} reused)" if row.units_reused else text


def _hours(value: float | None) -> str:
    if value is None:
        return "—"
    if 0 < value < 0.01:
        return "<0.01"
    return f"{value:.2g}" if value < 1 else f"{value:,.1f}"


def print_forecast(
    out: Console,
    rows: Sequence[DryRow],
    pool: Sequence[WorkerCapacity] | None,
    pool_text: str,
    *,
    brief: bool = False,
) -> Forecast | None:
    """Print the tasks, their resources and the forecast on ``pool`` (None: unknown); with
    ``brief``, the forecast line alone. Returns the forecast when there is a pool."""
    plans = [r.plan for r in rows if r.plan is not None]
    result = forecast(plans, pool) if pool is not None else None
    by_name = {t.plan.name: t for t in result.tasks} if result is not None else {}
    if not brief:
        table = Table(show_edge=False, pad_edge=False, box=None)
        for column in ("task", "type", "units", "queue", "memory/process", "resources from",
                       "speed", "core-h", "peak", "ETA"):  # fmt: skip
            left = column in ("task", "type", "resources from")
            table.add_column(column, justify="left" if left else "right", no_wrap=not left)
        for row in rows:
            p = row.plan
            if p is None and row.reused is not None:
                table.add_row(row.name, row.type, "—", "", "", row.note, "", "", "", "")
                continue
            if p is None:
                table.add_row(row.name, row.type, "?", "?", "?", row.note, "", "", "", "")
                continue
            f = by_name.get(p.name)
            queue = f"{p.queue} ({p.gpus} GPU)" if p.gpus else p.queue
            table.add_row(
                p.name,
                p.type,
                _units_cell(p, row),
                queue,
                format_gb(p.memory_per_worker_gb),
                p.source,
                format_rate(p.seconds_per_unit),
                _hours(f.core_hours) if f else "—",
                format_gb(f.peak_memory_gb) if f else "—",
                format_duration(f.eta_s) if f else "—",
            )
        out.print(table)
        out.print()
    reused = [r for r in rows if r.reused is not None]
    if reused:
        out.print(
            f"reused: {', '.join(f'{r.name} (from {r.reused})' for r in reused)}; "
            "the forecast counts the rest (--rerun TASK or --no-reuse to run them)"
        )
    partly = [r for r in rows if r.units_reused and r.units_from is not None]
    if partly:
        out.print(
            f"units reused: {', '.join(f'{r.name} ({r.note})' for r in partly)}; "
            "the forecast counts the units that run and the merge"
        )
    out.print(f"pool: {pool_text}")
    if result is None:
        out.print("forecast: no pool known (give one: --workers, --processes, --worker-memory-gb)")
        return None
    eta = format_duration(result.eta_s)
    if result.eta_s is None:
        eta = "unknown until the seconds per unit are learned (after a first run)"
    if any(r.plan is None and r.reused is None for r in rows):
        eta = "unknown: some task types are not installed here"
    if reused and not result.tasks:
        out.print("forecast: nothing to run, every task reuses earlier work")
        return result
    out.print(
        f"forecast: {_hours(result.core_hours)} core-hours, peak memory "
        f"{format_gb(result.peak_memory_gb)}, ETA {eta}"
    )
    for t in result.tasks:
        if t.problem is not None:
            out.print(f"[yellow]task {t.plan.name!r} cannot run on this pool: {t.problem}[/]")
    return result


#: The exit status of a dry run that found a task the pool cannot run (usable in CI).
CANNOT_RUN_EXIT = 2


def dry_run_exit(out: Console, result: Forecast | None, nothing: str) -> int:
    """Print the dry run's last line (``nothing``: what was not done) and return its exit
    status: `CANNOT_RUN_EXIT` when a task cannot run on the pool (each one was named by
    `print_forecast`), else 0."""
    stuck = [t.plan.name for t in result.tasks if t.problem is not None] if result else []
    out.print(nothing)
    if stuck:
        names = ", ".join(repr(n) for n in stuck)
        out.print(f"dry run failed: the pool cannot run {names} (exit {CANNOT_RUN_EXIT})")
        return CANNOT_RUN_EXIT
    return 0
