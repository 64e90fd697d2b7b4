"""What each task of a workflow would be dispatched with (`task_plans`, for
`simrun.core.forecast`) and reuse of a store's runs (`reuse_forecasts`): the dry run's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simrun.app.prepare import Prepared
from simrun.core.forecast import TaskPlan
from simrun.core.layout import StoreLayout
from simrun.core.reuse import (
    UnitsEarlier,
    UnitsTaken,
    choose,
    choose_units,
    forced_tasks,
    rerun_problems,
    reused_text,
    take_units,
    task_all_fingerprints,
    units_present,
    units_reused_text,
)
from simrun.core.sizing import queue_name
from simrun.plugins import ResourceHint, TaskType, UnitOutputs, count_units, unit_outputs
from simrun.resources import ResolvedResources, ResourceKey, ResourceStore, resource_key
from simrun.resources.policy import decide
from simrun.runstore.reads import (
    done_in_file,
    done_ranges_in_file,
    done_units_in_file,
    earlier_tasks,
)
from simrun.workflow import Problem, ResourceOverride, TaskSpec, Workflow, WorkflowError

#: The resources of a task from its key: (the key, its type's hint, its override).
Resolver = Callable[
    [ResourceKey, ResourceHint, ResourceOverride | None], Awaitable[ResolvedResources]
]


@dataclass(frozen=True)
class DryRow:
    """One task of a dry run: its plan, or why there is none here; the earlier run whose
    work it reuses (it will not run), or the run it takes ``units_reused`` units from."""

    name: str
    type: str
    plan: TaskPlan | None
    note: str = ""
    reused: str | None = None
    units_reused: int = 0
    units_from: str | None = None


def store_resolver(store: Path) -> Resolver:
    """Resolve as the embedded service would, from ``store/simrun.db``; the hint (or the
    override) alone when the file does not exist, which is then not created."""
    db = StoreLayout(store).db
    return ResourceStore(db, keep_open=False).resolve if db.is_file() else summaries_resolver(())


def resolved_from_summary(
    summary: Mapping[str, Any] | None, hint: ResourceHint, override: ResourceOverride | None
) -> ResolvedResources:
    """`decide`'s resources of a task, with the learned memory (unless overridden) and
    speed of its ``/resources`` row (None: nothing learned)."""
    resolved = decide([], hint, override)
    if summary is None:
        return resolved
    raw = summary.get("seconds_per_unit")
    resolved = replace(resolved, seconds_per_unit=None if raw is None else float(raw))
    if resolved.source == "override":
        return resolved
    return replace(
        resolved,
        memory_per_worker_gb=float(summary.get("requested_gb") or resolved.memory_per_worker_gb),
        source=str(summary.get("source") or resolved.source),
        samples=int(summary.get("samples") or 0),
    )


def summaries_resolver(summaries: Sequence[Mapping[str, Any]]) -> Resolver:
    """Resolve from a service's ``/resources`` rows (what it learned per key)."""
    by_key = {str(row["key"]): row for row in summaries}

    async def from_summary(
        key: ResourceKey, hint: ResourceHint, override: ResourceOverride | None
    ) -> ResolvedResources:
        return resolved_from_summary(by_key.get(key.text()), hint, override)

    return from_summary


@dataclass(frozen=True)
class UnitSource:
    """An earlier task a task could take units from: its outputs, what the type declares,
    and its units done (None: all)."""

    earlier: UnitsEarlier
    out: Path
    declared: UnitOutputs
    done: tuple[range, ...] | None = None

    def option(self, count: int) -> tuple[UnitsEarlier, list[range]]:
        """It and the units a task of ``count`` would take of it now (blocking I/O)."""
        units = units_present(self.out, self.declared, count, self.earlier.units, self.done)
        return self.earlier, units


@dataclass(frozen=True)
class ReuseForecast:
    """What the tasks would reuse: ``whole`` task → the run it takes its outputs from;
    ``units`` task → where it could take units from, in order."""

    whole: dict[str, str]
    units: dict[str, tuple[UnitSource, ...]]


async def reuse_forecasts(
    prepared: Prepared, types: Mapping[str, TaskType], store: Path
) -> ReuseForecast:
    """What the tasks of ``prepared`` would reuse of ``store`` (read only) as the service
    decides it; `WorkflowError` when ``--rerun`` names no task."""
    doc = prepared.doc
    problems = rerun_problems([spec.name for spec in doc.tasks], prepared.rerun)
    if problems:
        raise WorkflowError([Problem(("rerun",), why) for why in problems], "workflow")
    if not prepared.reuse or any(spec.type not in types for spec in doc.tasks):
        return ReuseForecast({}, {})
    layout = StoreLayout(store)
    sources = await asyncio.to_thread(prepared.sources)
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
    whole = await _whole_reuse(layout, prints, forced)
    wanted = {n: u for n, u in unit_prints.items() if n not in whole and n not in forced}
    declared = {n: unit_outputs(types[doc.task(n).type]) for n in wanted}
    return ReuseForecast(whole, await _unit_sources(layout, wanted, declared))


async def _whole_reuse(
    layout: StoreLayout, prints: Mapping[str, str], forced: set[str]
) -> dict[str, str]:
    """Task → the earlier run whose outputs it would take whole."""
    done = await done_in_file(layout.db, sorted(set(prints.values())))
    found: dict[str, str] = {}
    for name, fingerprint in prints.items():
        same = [d for d in done if d.fingerprint == fingerprint]
        earlier = await asyncio.to_thread(earlier_tasks, layout, same)
        run = choose(name in forced, earlier)
        if run is not None:
            found[name] = run
    return found


async def _unit_sources(
    layout: StoreLayout,
    wanted: Mapping[str, str],
    declared: Mapping[str, UnitOutputs | None],
) -> dict[str, tuple[UnitSource, ...]]:
    """Task → where it could take units from, for the tasks of unit fingerprints
    ``wanted`` whose type declares its unit outputs."""
    done_units = await done_units_in_file(layout.db, sorted(set(wanted.values())))
    found: dict[str, tuple[UnitSource, ...]] = {}
    for name, unit_print in wanted.items():
        outputs = declared[name]
        same = [d.earlier() for d in done_units if d.unit_fingerprint == unit_print]
        if outputs is None:
            continue
        sources = []
        for e in choose_units(False, same):
            done = None if e.done else tuple(await done_ranges_in_file(layout.db, e.run, e.task))
            sources.append(UnitSource(e, layout.task_out(e.run, e.task), outputs, done))
        if sources:
            found[name] = tuple(sources)
    return found


async def _count(task_type: TaskType, settings: Mapping[str, Any], where: int, name: str) -> int:
    """The units of a task (1 for a command), counted in a thread; `WorkflowError` names
    the task whose ``count_units`` failed."""
    if not task_type.splittable:
        return 1
    try:
        return await asyncio.to_thread(count_units, task_type, settings)
    except Exception as exc:  # plugin code may raise anything: name the task
        problem = Problem(
            ("tasks", where, "settings"),
            f"count_units failed: {type(exc).__name__}: {exc}",
            task=name,
        )
        raise WorkflowError([problem], "dry run") from exc


async def _taken(
    task_type: TaskType, units: int, sources: Sequence[UnitSource]
) -> UnitsTaken | None:
    """What a task of ``units`` units would take of ``sources`` (`take_units`)."""
    if not task_type.splittable or not sources:
        return None
    return take_units(units, [await asyncio.to_thread(s.option, units) for s in sources])


async def task_plans(
    doc: Workflow,
    types: Mapping[str, TaskType],
    resolve: Resolver,
    reused: Mapping[str, str] | None = None,
    units_from: Mapping[str, Sequence[UnitSource]] | None = None,
) -> list[DryRow]:
    """Each task of ``doc`` in order with its units (counted in threads) and resources; a
    task ``reused`` has no plan, one of ``units_from`` plans the units it would not take."""
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
        settings = json.loads(task_type.settings.model_validate(spec.settings).model_dump_json())
        units = await _count(task_type, settings, positions[name], name)
        taken = await _taken(task_type, units, units_from.get(name, ()))
        n = taken.start.reused if taken else 0
        key = resource_key(task_type, settings, doc.model)
        resolved = await resolve(key, task_type.hint, spec.resources)
        depends = tuple(sorted(d for d in dependencies[name] if d not in reused))
        plan = _plan(doc, spec, task_type, units - n, resolved, depends)
        if taken is None:
            return DryRow(name, spec.type, plan)
        run = taken.earlier.run
        return DryRow(
            name, spec.type, plan, units_reused_text(n, run), units_reused=n, units_from=run
        )

    return list(await asyncio.gather(*(one(name) for name in doc.order())))


def _plan(
    doc: Workflow,
    spec: TaskSpec,
    task_type: TaskType,
    units: int,
    resolved: ResolvedResources,
    depends: tuple[str, ...],
) -> TaskPlan:
    return TaskPlan(
        name=spec.name,
        type=spec.type,
        kind="chunk" if task_type.splittable else "command",
        units=units,
        queue=queue_name(doc.in_run_image(task_type).image, resolved.gpus),
        memory_base_gb=resolved.memory_base_gb,
        memory_per_worker_gb=resolved.memory_per_worker_gb,
        gpus=resolved.gpus,
        seconds_per_unit=resolved.seconds_per_unit,
        source=resolved.source,
        uses_cores=task_type.uses_cores,
        depends=depends,
        scratch_gb=resolved.scratch_gb,
    )
