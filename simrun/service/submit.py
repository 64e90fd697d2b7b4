"""Turning a checked workflow into a run: its id, its tasks with their input paths, and the
copy of its sources."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simrun.core.layout import InputRef, StoreLayout
from simrun.core.reuse import forced_tasks, rerun_problems, task_all_fingerprints
from simrun.plugins import TaskType
from simrun.runstore.rows import NewRun, NewTask
from simrun.workflow import Problem, Workflow, WorkflowError


def new_run_id(now_s: float | None = None, token: str | None = None) -> str:
    """A run id that sorts by submission time: ``20250101-120000-1a2b3c``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
    return f"{stamp}-{token or secrets.token_hex(3)}"


def source_copy(layout: StoreLayout, run: str, name: str, original: Path) -> Path:
    """Where the copy of source ``name`` of run ``run`` lives."""
    return layout.sources(run) / name / original.name


def input_path(layout: StoreLayout, run: str, ref: str, sources: Mapping[str, Path]) -> Path:
    """The path an input reference reads: a source's directory or an upstream output."""
    parsed = InputRef.parse(ref)
    if parsed is None:
        raise ValueError(f"input {ref!r} is neither 'task.port' nor 'source:name'")
    if parsed.kind == "source":
        return source_copy(layout, run, parsed.name, sources[parsed.name]).parent
    out = layout.task_out(run, parsed.name)
    return out if parsed.port == "out" else out / parsed.port


def plan_run(
    run_id: str,
    doc: Workflow,
    settings_by_task: Mapping[str, dict[str, Any]],
    types: Mapping[str, TaskType],
    layout: StoreLayout,
    sources: Mapping[str, Path],
    text: str,
    created_s: float,
    *,
    reuse: bool = True,
    rerun: Sequence[str] = (),
    environment_image: str | None = None,
) -> NewRun:
    """The run to store for a checked document, each task with its fingerprint and whether
    it may reuse earlier work (blocking: sources are hashed)."""
    problems = [
        Problem(("tasks", i, "type"), f"task type {spec.type!r} is not installed", task=spec.name)
        for i, spec in enumerate(doc.tasks)
        if spec.type not in types
    ] + [
        Problem(("tasks", i, "settings"), "settings were not checked", task=spec.name)
        for i, spec in enumerate(doc.tasks)
        if spec.name not in settings_by_task
    ]
    names = [spec.name for spec in doc.tasks]
    problems += [Problem(("rerun",), why) for why in rerun_problems(names, rerun)]
    if problems:
        raise WorkflowError(problems, "workflow")
    deps = doc.dependencies()
    order = doc.order()
    forced = forced_tasks(deps, rerun, reuse)
    prints, unit_prints = task_all_fingerprints(
        order,
        {
            t.name: (
                doc.in_run_image(types[t.type], environment_image),
                settings_by_task[t.name],
                t.inputs,
            )
            for t in doc.tasks
        },
        sources,
    )
    tasks = []
    for position, name in enumerate(order):
        spec = doc.task(name)
        task_type = types[spec.type]
        tasks.append(
            NewTask(
                name=name,
                type=spec.type,
                position=position,
                settings=dict(settings_by_task[name]),
                inputs={
                    port: str(input_path(layout, run_id, ref, sources))
                    for port, ref in sorted(spec.inputs.items())
                },
                depends=tuple(sorted(deps[name])),
                splittable=task_type.splittable,
                has_merge=task_type.splittable and task_type.merge is not None,
                retry=spec.retry_fields(),
                staged=tuple(sorted(spec.stage)),
                fingerprint=prints[name],
                reuse=name not in forced,
                unit_fingerprint=unit_prints.get(name),
                override=(
                    spec.resources.model_dump(exclude_none=True)
                    if spec.resources is not None
                    else None
                ),
            )
        )
    return NewRun(
        id=run_id,
        name=doc.name,
        model=doc.model,
        document=text,
        tasks=tuple(tasks),
        created_s=created_s,
        image=doc.image if doc.image is not None else environment_image,
    )


def copy_sources(layout: StoreLayout, run: str, sources: Mapping[str, Path]) -> None:
    """Copy every source into the directory of run ``run`` (blocking)."""
    for name, original in sources.items():
        target = source_copy(layout, run, name, original)
        target.parent.mkdir(parents=True, exist_ok=True)
        if original.is_dir():
            shutil.copytree(original, target)
        else:
            shutil.copy2(original, target)


def remove_run_dir(run_dir: Path) -> None:
    """Remove what a submission that failed had written (blocking)."""
    shutil.rmtree(run_dir, ignore_errors=True)
