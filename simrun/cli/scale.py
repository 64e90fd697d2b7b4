"""``simrun scale``: the worker containers each queue wants now, set with ``docker compose``
or ``kubectl`` (``--apply``)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from simrun.cli.common import console
from simrun.cli.options import (
    TOKEN,
    URL,
    container_processes_option,
    worker_memory_option,
)
from simrun.cli.tables import table
from simrun.client import Client, ClientError
from simrun.config import POSITIVE
from simrun.core.scaling import (
    DEFAULT_SECONDS_PER_UNIT,
    BacklogView,
    ContainerShape,
    QueueLoad,
    ScaleDecision,
    ScalePolicy,
    desired_containers,
    parse_backlog,
    work_duration,
)
from simrun.core.sizing import CPU, GPU, QueueName, image_queue
from simrun.core.wire import PayloadError


class ScaleError(ClientError):
    """A scaling that cannot be done, and why (one line)."""


@dataclass(frozen=True)
class Planned:
    """The decision of one queue and what with (``shape_source``: "live", "given" or
    "service default")."""

    queue: str
    decision: ScaleDecision
    shape: ContainerShape
    shape_source: str
    workers: int
    work_s: float


def backlog_of(document: Any) -> BacklogView:
    """A ``GET /backlog`` answer; `ScaleError` when it is none."""
    try:
        return parse_backlog(document)
    except ValueError as exc:
        raise ScaleError(f"the service's backlog answer is not understood: {exc}") from exc


def assumed_shape(
    memory_gb: float | None, processes: int | None, service: ContainerShape
) -> tuple[ContainerShape, str]:
    """The shape of a container of a queue without live workers, and where it came from:
    each flag given wins, field by field, over the service's default shape."""
    if memory_gb is None and processes is None:
        return service, "service default"
    shape = ContainerShape(
        memory_gb=service.memory_gb if memory_gb is None else memory_gb,
        processes=service.processes if processes is None else processes,
    )
    return shape, "given"


def plan(
    queues: Sequence[QueueLoad],
    policy: ScalePolicy,
    given: ContainerShape,
    given_source: str = "given",
) -> list[Planned]:
    """The decision of each queue with its live shape, or ``given`` while none is live."""
    return [
        Planned(
            queue=load.queue,
            decision=desired_containers(load.backlog, load.shape or given, policy),
            shape=load.shape or given,
            shape_source="live" if load.shape is not None else given_source,
            workers=load.workers,
            work_s=load.backlog.seconds(policy.default_seconds_per_unit),
        )
        for load in queues
    ]


def compose_command(desired: Mapping[QueueName, int], compose_file: Path | None) -> list[str]:
    """``docker compose … up -d --scale SERVICE=N … --no-recreate`` for the queues in
    ``desired`` (the gpu workers are in the compose profile ``gpu``)."""
    argv = ["docker", "compose"]
    if compose_file is not None:
        argv += ["-f", str(compose_file)]
    if GPU in desired:
        argv += ["--profile", "gpu"]
    scales = [arg for q, n in desired.items() for arg in ("--scale", f"{q.compose_service}={n}")]
    return [*argv, "up", "-d", *scales, "--no-recreate"]


def kubectl_command(deployment: str, count: int) -> list[str]:
    """``kubectl scale deployment/NAME --replicas=N``."""
    return ["kubectl", "scale", f"deployment/{deployment}", f"--replicas={count}"]


def apply_commands(
    planned: Sequence[Planned],
    apply: str,
    queues: Sequence[str],
    *,
    compose_file: Path | None = None,
    deployment: str | None = None,
) -> list[list[str]]:
    """The commands that set the replicas of the workers of ``queues`` to their decision;
    `ScaleError` for a queue that has no decision in ``planned`` or is no queue."""
    by_queue = {p.queue: p.decision.desired for p in planned}
    missing = [q for q in queues if q not in by_queue]
    if missing:
        raise ScaleError(f"no decision for the queues {missing}")
    try:
        desired = {QueueName(q): by_queue[q] for q in queues}
    except PayloadError as exc:
        raise ScaleError(f"{exc}: it has no docker compose service or Deployment") from exc
    if apply == "compose":
        return [compose_command(desired, compose_file)]
    if deployment is not None and len(queues) > 1:
        raise ScaleError("--deployment names one Deployment: give one --queue with it")
    return [kubectl_command(deployment or q.deployment, n) for q, n in desired.items()]


def _table(planned: Sequence[Planned]) -> Table:
    rows = [
        (
            p.queue,
            str(p.decision.units),
            work_duration(p.work_s),
            str(p.workers),
            f"{p.shape.processes} x {p.shape.memory_gb:g} GiB ({p.shape_source})",
            str(p.decision.desired),
        )
        for p in planned
    ]
    columns = ("queue", "units", "work", "workers", "container", "desired")
    return table(columns, rows, left=("queue", "container"))


def _run(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(list(argv), check=False)  # our own argv, no shell
    except FileNotFoundError as exc:
        raise ScaleError(f"{argv[0]} is not installed here (or not on PATH)") from exc
    if done.returncode != 0:
        raise ScaleError(f"`{shlex.join(argv)}` exited with status {done.returncode}")


@dataclass(frozen=True)
class ScaleRequest:
    """What ``simrun scale`` was asked: the policy, the shape of queues without live
    workers, how to apply the decision (``apply`` None: only print)."""

    policy: ScalePolicy
    memory_gb: float | None = None
    processes: int | None = None
    apply: str | None = None
    queues: tuple[str, ...] = (CPU,)
    compose_file: Path | None = None
    deployment: str | None = None
    dry_run: bool = False


def _round(client: Client, options: ScaleRequest, out: Console) -> None:
    view = backlog_of(client.backlog())
    # A queue to apply that the service does not list has no backlog and no workers.
    known = {q.queue for q in view.queues}
    missing = [QueueLoad(q, 0, (), 0, None) for q in options.queues if q not in known]
    given, source = assumed_shape(options.memory_gb, options.processes, view.default_shape)
    planned = plan([*view.queues, *missing], options.policy, given, source)
    out.print(_table(planned))
    for p in planned:
        out.print(p.decision.reason, markup=False, emoji=False, soft_wrap=True)
    if options.apply is None:
        return
    commands = apply_commands(
        planned,
        options.apply,
        options.queues,
        compose_file=options.compose_file,
        deployment=options.deployment,
    )
    for argv in commands:
        if options.dry_run:
            out.print(f"would run: {shlex.join(argv)}", markup=False, soft_wrap=True)
        else:
            out.print(f"running: {shlex.join(argv)}", markup=False, soft_wrap=True)
            _run(argv)


HELP = {
    "target_minutes": "Drain the queued work within this time.",
    "processes": "Processes per container, while no worker of the queue is live "
    "[default: the service's --worker-processes].",
    "memory_gb": "Memory per container (GiB), while no worker of the queue is live "
    "[default: the service's --worker-memory-gb].",
    "default_seconds": "Seconds per unit assumed for keys that learned none yet.",
    "apply": "Set the replica count with docker compose or kubectl [default: only print].",
    "queue": "Queue to apply the decision to (repeatable; cpu, gpu or image:NAME as the "
    "table lists it) [default: cpu].",
    "image": "The queue of this task image, as --queue image:NAME (repeatable).",
    "compose_file": "The compose file [default: docker compose's own lookup].",
    "deployment": "The Kubernetes Deployment [default: simrun-worker-cpu, simrun-worker-<queue>].",
    "watch": "Repeat every SECONDS until interrupted.",
}


@click.command()
@URL
@TOKEN
@click.option("--target-minutes", type=POSITIVE, default=10.0, show_default=True,
              help=HELP["target_minutes"])  # fmt: skip
@click.option("--min", "min_containers", type=click.IntRange(0), default=0, show_default=True,
              help="Fewest containers per queue.")  # fmt: skip
@click.option("--max", "max_containers", type=click.IntRange(0), default=10, show_default=True,
              help="Most containers per queue.")  # fmt: skip
@container_processes_option(HELP["processes"])
@worker_memory_option(HELP["memory_gb"])
@click.option("--default-seconds", type=POSITIVE, default=DEFAULT_SECONDS_PER_UNIT,
              show_default=True, help=HELP["default_seconds"])  # fmt: skip
@click.option("--apply", type=click.Choice(["compose", "kubernetes"]), help=HELP["apply"])
@click.option("--queue", "queues", multiple=True, help=HELP["queue"])
@click.option("--image", "images", multiple=True, help=HELP["image"])
@click.option("--compose-file", type=click.Path(dir_okay=False, path_type=Path),
              help=HELP["compose_file"])  # fmt: skip
@click.option("--deployment", help=HELP["deployment"])
@click.option("--watch", type=click.FloatRange(min=1), metavar="SECONDS", help=HELP["watch"])
@click.option("--dry-run", is_flag=True, help="Print the commands of --apply, run nothing.")
def scale(
    url: str,
    token: str | None,
    target_minutes: float,
    min_containers: int,
    max_containers: int,
    processes: int | None,
    worker_memory_gb: float | None,
    default_seconds: float,
    apply: str | None,
    queues: tuple[str, ...],
    images: tuple[str, ...],
    compose_file: Path | None,
    deployment: str | None,
    watch: float | None,
    dry_run: bool,
) -> None:
    """Worker containers each queue wants from the live backlog; --apply sets them.

    The queued work (units x learned seconds per unit) over --target-minutes, over the
    processes of a container, more where learned memory packs fewer units into one, and no
    more than the units keep busy; clamped to --min/--max.
    """
    if min_containers > max_containers:
        raise click.BadParameter(
            f"--min {min_containers} is more than --max {max_containers}", param_hint="--min"
        )
    if deployment is not None and apply != "kubernetes":
        raise click.BadParameter("only with --apply kubernetes", param_hint="--deployment")
    if compose_file is not None and apply != "compose":
        raise click.BadParameter("only with --apply compose", param_hint="--compose-file")
    try:
        named = tuple(dict.fromkeys([*queues, *(image_queue(i) for i in images)])) or (CPU,)
    except PayloadError as exc:
        raise click.BadParameter(str(exc), param_hint="--image") from exc
    policy = ScalePolicy(target_minutes * 60, default_seconds, min_containers, max_containers)
    request = ScaleRequest(
        policy, worker_memory_gb, processes, apply, named, compose_file, deployment, dry_run
    )
    with Client(url, token) as client:
        if watch is not None:
            _watch(client, request, console(), watch)
            return
        try:
            _round(client, request, console())
        except ClientError as exc:
            raise click.ClickException(str(exc)) from exc


def _watch(client: Client, request: ScaleRequest, out: Console, every_s: float) -> None:
    """A round every ``every_s`` until Ctrl-C (an error of a round is printed, the next
    tries again)."""
    stop = threading.Event()
    # Ctrl-C ends the watch between rounds: a KeyboardInterrupt raised in the middle of an
    # HTTP request could leave the client's connection pool half-closed.
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    try:
        while not stop.is_set():
            try:
                _round(client, request, out)
            except ClientError as exc:
                click.secho(f"error: {exc}", fg="red", err=True)
            stop.wait(every_s)
    finally:
        signal.signal(signal.SIGINT, previous)
    click.echo("stopped", err=True)


if __name__ == "__main__":
    scale(prog_name="simrun scale")
