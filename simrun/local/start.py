"""The one way an embedded session is made ready, for ``simrun run``, ``simrun replay
--store`` and the Python API: its pool from this machine, the images its workers serve
(a new workflow's, or a stored run's), the check of a run to go on with, its options."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from simrun.app.prepare import Prepared
from simrun.core.forecast import pool_text
from simrun.local.machine import LocalError, default_capacity, gpu_shares, local_gpus, machine
from simrun.local.reads import store_db
from simrun.local.session import image_problem, images_of, local_engine, unit_images
from simrun.local.settings import LocalOptions
from simrun.plugins import TaskType
from simrun.runstore.store import RunStore
from simrun.workflow import WorkflowError, parse_workflow


@dataclass(frozen=True)
class LocalPool:
    """The worker containers of an embedded session, and the machine's GPUs they share."""

    workers: int
    processes: int
    memory_gb: float
    gpu_ids: tuple[str, ...] = ()

    def text(self) -> str:
        text = pool_text(self.workers, self.processes, self.memory_gb)
        return f"{text}; GPUs {', '.join(self.gpu_ids)}" if self.gpu_ids else text

    @property
    def gpus_per_worker(self) -> int:
        """The most GPUs one worker gets (the forecast's figure)."""
        return max((len(s) for s in gpu_shares(self.gpu_ids, self.workers)), default=0)


def local_pool(settings: LocalOptions) -> LocalPool:
    """The pool of ``settings``, completed from this machine (its cores, 80% of its free
    memory, its GPUs: CUDA_VISIBLE_DEVICES, else nvidia-smi -L)."""
    workers = settings.workers
    if workers < 1:
        raise LocalError(f"workers must be at least 1, not {workers}")
    procs, memory = default_capacity(*machine(), workers, settings.processes, settings.memory_gb)
    return LocalPool(workers, procs, memory, local_gpus(os.environ))


@dataclass(frozen=True)
class ReplayRequest:
    """Which failed units to put back (`simrun.service.controller.Controller.replay`);
    with ``rerun``, every unit of ``task`` and of the tasks reading it."""

    task: str | None = None
    units: tuple[int, ...] = ()
    memory_gb: float | None = None
    rerun: bool = False


def task_types_in(prepared: Prepared, types: dict[str, TaskType]) -> list[tuple[str, TaskType]]:
    """The (task, type) pairs of ``prepared`` whose type is installed here."""
    return [(t.name, types[t.type]) for t in prepared.doc.tasks if t.type in types]


async def check_run(
    store: Path,
    run_id: str,
    replay: ReplayRequest | None,
    types: dict[str, TaskType],
    engine: str | None,
) -> tuple[str | None, tuple[str, ...]]:
    """The environment image of run ``run_id`` of ``store`` and the images its splittable
    tasks run in (from its stored document). `LocalError` before anything starts when it
    cannot go on: no such store or run, a run that ended with nothing failed, an ended run
    without a replay, a task in an image without a container ``engine``."""
    runs = await RunStore.open(store_db(store))
    try:
        row = await runs.run(run_id)
        if row is None:
            latest = [r.id for r in await runs.runs(limit=3)]
            hint = f"; its latest: {', '.join(latest)}" if latest else ""
            raise LocalError(f"there is no run {run_id!r} in {store}{hint}")
        failed = await runs.failures(run_id)
    finally:
        await runs.close()
    if row.state != "running" and replay is None:
        what = "; retry its failed units with `simrun replay`" if row.state == "failed" else ""
        raise LocalError(f"run {run_id} already ended ({row.state}){what}")
    if row.state != "running" and not failed and replay is not None and not replay.rerun:
        raise LocalError(
            f"run {run_id} ended ({row.state}) with no failed units to replay; "
            "run a task again, done units too, with --task TASK --all"
        )
    try:
        doc = parse_workflow(row.document)
    except WorkflowError:
        return row.image, ()
    tasks = [(t.name, types[t.type]) for t in doc.tasks if t.type in types]
    problem = image_problem(tasks, engine, row.image)
    if problem is not None:
        raise LocalError(problem)
    return row.image, unit_images(tasks, row.image)


async def ready_session(
    settings: LocalOptions,
    types: dict[str, TaskType],
    *,
    prepared: Prepared | None = None,
    replay: ReplayRequest | None = None,
    pool: LocalPool | None = None,
) -> tuple[LocalOptions, LocalPool]:
    """``settings`` (what the caller gave) made into the options of an `EmbeddedSession`
    for the workflow ``prepared`` or the run ``settings.go_on_with`` (`check_run`), and its
    ``pool`` (default: `local_pool`): the images their tasks run in get workers of their
    own, through this machine's container engine. `LocalError` when it cannot run them."""
    pool = pool or local_pool(settings)
    store, engine = settings.store, local_engine(settings.engine)
    run_image: str | None = None
    in_image: tuple[str, ...] = ()
    if settings.go_on_with is not None:
        run_image, in_image = await check_run(store, settings.go_on_with, replay, types, engine)
    elif prepared is not None:
        tasks = task_types_in(prepared, types)
        problem = image_problem(tasks, engine, prepared.doc.image)
        if problem is not None:
            raise LocalError(problem)
        run_image, in_image = prepared.doc.image, unit_images(tasks, prepared.doc.image)
    return replace(
        settings,
        workers=pool.workers,
        processes=pool.processes,
        memory_gb=pool.memory_gb,
        gpu_ids=pool.gpu_ids,
        python_path=(os.getcwd(),) if settings.plugins else (),
        images=images_of(list(types.values()), run_image),
        unit_images=in_image if engine is not None else (),
        engine=engine,
        hold_interrupted=True,
    ), pool


def run_commands(run_id: str, store: Path, plugins: tuple[str, ...]) -> tuple[str, str]:
    """The commands that replay run ``run_id`` of ``store`` and that go on with it."""
    extra = [a for ref in plugins for a in ("--plugins", ref)]
    replay = shlex.join(["simrun", "replay", run_id, "--store", str(store), *extra])
    resume = shlex.join(["simrun", "run", "--resume", run_id, "--store", str(store), *extra])
    return replay, resume


def held_line(held: tuple[str, ...], store: Path, plugins: tuple[str, ...]) -> str | None:
    """The line about the interrupted runs a session leaves alone (None without any): which
    they are, and the commands that go on with one or cancel it."""
    if not held:
        return None
    one = held[0] if len(held) == 1 else "RUN"
    resume = run_commands(one, store, plugins)[1]
    cancel = shlex.join(["simrun", "cancel", one, "--store", str(store)])
    runs = "run " + held[0] if len(held) == 1 else "runs " + ", ".join(held)
    return (
        f"note: {runs} of this store {'was' if len(held) == 1 else 'were'} interrupted and "
        f"{'is' if len(held) == 1 else 'are'} left as stopped; go on: {resume}; "
        f"or drop: {cancel}"
    )
