"""``simrun scale``: how many worker containers each queue wants now, and making it so.

It reads the live backlog from the service (``GET /backlog``: per queue the units not done
by resource key, their learned seconds per unit and memory per worker, and the live
workers' shape), decides with `simrun.core.scaling.desired_containers`, prints a table, and with
``--apply`` sets the replica count:

* ``compose``: ``docker compose [-f FILE] up -d --scale worker-cpu=N --no-recreate`` (the
  services of docker-compose.yml are ``worker-cpu`` and ``worker-gpu``; the latter is in
  the profile ``gpu``, which the command then enables);
* ``kubernetes``: ``kubectl scale deployment/NAME --replicas=N`` (``--deployment``,
  ``simrun-worker-<queue>`` by default, as in deploy/kubernetes/).

The workers of a task image's queue (``image:NAME``, ``--image NAME``) are the compose
service ``worker-image-<name>`` and the Deployment ``simrun-worker-image-<name>``
(`worker_name`; see the examples in docker-compose.yml and deploy/kubernetes/examples/).

The container shape is the live workers' of the queue; while none is live it is the one
given by ``--processes`` and ``--worker-memory-gb``, else the service's default worker shape
(``simrun service --worker-memory-gb/--worker-processes``), else 4 processes x 8 GiB.
``--dry-run`` prints the commands instead of running them; ``--watch SECONDS`` repeats the
whole (an error of one round is printed and the next round tries again).
"""

from __future__ import annotations

import re
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
    POSITIVE,
    TOKEN,
    URL,
    container_processes_option,
    worker_memory_option,
)
from simrun.client import Client, ClientError
from simrun.core.scaling import (
    DEFAULT_SECONDS_PER_UNIT,
    DEFAULT_SHAPE,
    BacklogEntry,
    ContainerShape,
    Decision,
    QueueBacklog,
    ScalePolicy,
    desired_containers,
    work_duration,
)
from simrun.core.sizing import image_queue

#: The docker-compose.yml service of each queue, and the profile it needs (if any).
COMPOSE_SERVICES: Mapping[str, tuple[str, str | None]] = {
    "cpu": ("worker-cpu", None),
    "gpu": ("worker-gpu", "gpu"),
}


def worker_name(queue: str) -> str:
    """The name of the workers of ``queue`` (a compose service ``worker-…``, a Kubernetes
    Deployment ``simrun-worker-…``): the queue itself for cpu and gpu; for an image queue
    ``image:NAME``, ``image-`` and NAME in lower case with every character but letters,
    digits and ``-`` made ``-`` (``image:solver_2.1`` -> ``image-solver-2-1``), a name that
    both compose and Kubernetes take."""
    if not queue.startswith("image:"):
        return queue
    slug = re.sub(r"[^a-z0-9-]", "-", queue.removeprefix("image:").lower()).strip("-")
    return f"image-{slug}"


class ScaleError(ClientError):
    """A scaling that cannot be done, and why (one line)."""


@dataclass(frozen=True)
class LiveQueue:
    """One queue as the service sees it: its backlog, live workers and their shape."""

    backlog: QueueBacklog
    workers: int
    shape: ContainerShape | None


@dataclass(frozen=True)
class Planned:
    """The decision of one queue and what it was decided with (``shape_source``: "live"
    or "given")."""

    queue: str
    decision: Decision
    shape: ContainerShape
    shape_source: str
    workers: int
    work_s: float


def parse_backlog(document: Any) -> list[LiveQueue]:
    """The queues of a ``GET /backlog`` answer; `ScaleError` when it is not one."""
    try:
        out = []
        for item in document["queues"]:
            entries = tuple(
                BacklogEntry(
                    key=str(e["key"]),
                    units=e["units"],
                    seconds_per_unit=e["seconds_per_unit"],
                    memory_per_worker_gb=e["memory_per_worker_gb"],
                )
                for e in item["entries"]
            )
            shape = item.get("shape")
            out.append(
                LiveQueue(
                    backlog=QueueBacklog(str(item["queue"]), entries),
                    workers=int(item.get("workers", 0)),
                    shape=None
                    if shape is None
                    else ContainerShape(shape["memory_gb"], shape["processes"]),
                )
            )
        return out
    except (KeyError, TypeError, ValueError) as exc:
        raise ScaleError(f"the service's backlog answer is not understood: {exc!r}") from exc


def service_default_shape(document: Any) -> ContainerShape | None:
    """The service's default worker shape in a ``GET /backlog`` answer (None from a service
    that does not say it)."""
    shape = document.get("default_shape") if isinstance(document, dict) else None
    if not isinstance(shape, dict):
        return None
    try:
        return ContainerShape(float(shape["memory_gb"]), int(shape["processes"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ScaleError(f"the service's default_shape is not understood: {exc!r}") from exc


def assumed_shape(
    memory_gb: float | None, processes: int | None, service: ContainerShape | None
) -> tuple[ContainerShape, str]:
    """The shape of a container of a queue without live workers, and where it came from:
    each flag given wins, then the service's default shape, then `DEFAULT_SHAPE`."""
    base, source = (
        (service, "service default")
        if service is not None
        else (
            DEFAULT_SHAPE,
            "default",
        )
    )
    if memory_gb is None and processes is None:
        return base, source
    shape = ContainerShape(
        memory_gb=base.memory_gb if memory_gb is None else memory_gb,
        processes=base.processes if processes is None else processes,
    )
    return shape, "given"


def plan(
    queues: Sequence[LiveQueue],
    policy: ScalePolicy,
    given: ContainerShape,
    given_source: str = "given",
) -> list[Planned]:
    """The decision of each queue with its live shape, or ``given`` while none is live."""
    out = []
    for live in queues:
        shape = live.shape or given
        decision = desired_containers(live.backlog, shape, policy)
        work_s = sum(
            e.units
            * (
                policy.default_seconds_per_unit
                if e.seconds_per_unit is None
                else e.seconds_per_unit
            )
            for e in live.backlog.entries
        )
        out.append(
            Planned(
                queue=live.backlog.queue,
                decision=decision,
                shape=shape,
                shape_source="live" if live.shape is not None else given_source,
                workers=live.workers,
                work_s=work_s,
            )
        )
    return out


def compose_command(desired: Mapping[str, int], compose_file: Path | None) -> list[str]:
    """``docker compose … up -d --scale SERVICE=N … --no-recreate`` for the cpu/gpu queues
    in ``desired``; `ScaleError` for a queue that has no compose service."""
    argv = ["docker", "compose"]
    if compose_file is not None:
        argv += ["-f", str(compose_file)]
    scales: list[str] = []
    for queue, count in desired.items():
        if queue in COMPOSE_SERVICES:
            service, profile = COMPOSE_SERVICES[queue]
        elif queue.startswith("image:"):
            service, profile = f"worker-{worker_name(queue)}", None
        else:
            raise ScaleError(
                f"queue {queue!r} has no docker compose service (only "
                f"{', '.join(COMPOSE_SERVICES)} and image queues): scale its workers yourself"
            )
        if profile is not None:
            argv += ["--profile", profile]
        scales += ["--scale", f"{service}={count}"]
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
    """The commands that set the replicas of ``queues`` to their decision; `ScaleError`
    for a queue that has none in ``planned``."""
    by_queue = {p.queue: p.decision.desired for p in planned}
    missing = [q for q in queues if q not in by_queue]
    if missing:
        raise ScaleError(f"no decision for the queues {missing}")
    desired = {q: by_queue[q] for q in queues}
    if apply == "compose":
        return [compose_command(desired, compose_file)]
    if deployment is not None and len(queues) > 1:
        raise ScaleError("--deployment names one Deployment: give one --queue with it")
    return [
        kubectl_command(deployment or f"simrun-worker-{worker_name(q)}", n)
        for q, n in desired.items()
    ]


def _table(planned: Sequence[Planned]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("queue", "units", "work", "workers", "container", "desired"):
        table.add_column(name, justify="left" if name in ("queue", "container") else "right")
    for p in planned:
        table.add_row(
            p.queue,
            str(p.decision.units),
            work_duration(p.work_s),
            str(p.workers),
            f"{p.shape.processes} x {p.shape.memory_gb:g} GiB ({p.shape_source})",
            str(p.decision.desired),
        )
    return table


def _run(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(list(argv), check=False)  # our own argv, no shell
    except FileNotFoundError as exc:
        raise ScaleError(f"{argv[0]} is not installed here (or not on PATH)") from exc
    if done.returncode != 0:
        raise ScaleError(f"`{shlex.join(argv)}` exited with status {done.returncode}")


@dataclass(frozen=True)
class ScaleRequest:
    """What ``simrun scale`` was asked for: the policy, the shape flags of queues without
    live workers, and how to apply the decision (``apply`` None: only print)."""

    policy: ScalePolicy
    memory_gb: float | None = None
    processes: int | None = None
    apply: str | None = None
    queues: tuple[str, ...] = ("cpu",)
    compose_file: Path | None = None
    deployment: str | None = None
    dry_run: bool = False


def _round(client: Client, options: ScaleRequest, out: Console) -> None:
    document = client.backlog()
    live = parse_backlog(document)
    # A queue to apply that the service does not list has no backlog and no workers.
    known = {q.backlog.queue for q in live}
    live += [LiveQueue(QueueBacklog(q), 0, None) for q in options.queues if q not in known]
    given, source = assumed_shape(
        options.memory_gb, options.processes, service_default_shape(document)
    )
    planned = plan(live, options.policy, given, source)
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
    "[default: the service's --worker-processes, else 4].",
    "memory_gb": "Memory per container (GiB), while no worker of the queue is live "
    "[default: the service's --worker-memory-gb, else 8].",
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
    policy = ScalePolicy(target_minutes * 60, default_seconds, min_containers, max_containers)
    request = ScaleRequest(
        policy,
        worker_memory_gb,
        processes,
        apply,
        tuple(dict.fromkeys([*queues, *(image_queue(i) for i in images)])) or ("cpu",),
        compose_file,
        deployment,
        dry_run,
    )
    out = console()
    with Client(url, token) as client:
        if watch is None:
            try:
                _round(client, request, out)
            except ClientError as exc:
                raise click.ClickException(str(exc)) from exc
            return
        stop = threading.Event()
        # Ctrl-C ends the watch between rounds: a KeyboardInterrupt raised in the middle of
        # an HTTP request could leave the client's connection pool half-closed.
        previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
        try:
            while not stop.is_set():
                try:
                    _round(client, request, out)
                except ClientError as exc:
                    click.secho(f"error: {exc}", fg="red", err=True)
                stop.wait(watch)
        finally:
            signal.signal(signal.SIGINT, previous)
        click.echo("stopped", err=True)


if __name__ == "__main__":
    scale(prog_name="simrun scale")
