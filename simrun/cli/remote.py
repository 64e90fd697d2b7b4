"""The commands that work with a service: ``submit``, ``status``, ``replay``, ``cancel`` and
``resources``; ``status``, ``resources`` and ``replay`` also work on a store (``--store``)."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from simrun.app.types import load_types_from_here
from simrun.cli.common import console, err_console, shell_join
from simrun.cli.options import (
    EVERY_S,
    NO_REUSE,
    PLUGINS,
    RERUN,
    SET,
    STORE_HINT,
    TOKEN,
    URL,
    container_processes_option,
    local_store,
    read_store_option,
    url_args,
    worker_memory_option,
)
from simrun.config import option
from simrun.local.machine import LocalError
from simrun.local.settings import LocalOptions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from simrun.app.follow import Reader
    from simrun.client import Client
    from simrun.core.sizing import WorkerCapacity
    from simrun.core.views import RunView
    from simrun.local.reads import StoreReader
    from simrun.plugins import TaskType
    from simrun.workflow import SettingOverride, Workflow

# The commands import what they use when they run: `simrun status --help` does not wait.

#: Seconds between two views of a followed run without news (a redraw, or a poll).
POLL_S = 1.0

T = TypeVar("T")


@dataclass(frozen=True)
class Where:
    """What a command that reads a store or a service reads: the store of `simrun run`
    (``store``), else the service at ``url``."""

    url: str
    token: str | None
    store: Path | None = None
    store_hint: Path | None = None

    def args(self) -> list[str]:
        """The options that name it in the commands printed."""
        return ["--store", str(self.store)] if self.store is not None else url_args(self.url)

    @contextmanager
    def service(self) -> Iterator[Client]:
        """A client of the service; when it cannot be reached and ``store_hint`` is a store,
        the error says how to read that instead."""
        import httpx

        from simrun.client import Client, ClientError
        from simrun.core.layout import StoreLayout

        client, hint = Client(self.url, self.token), self.store_hint
        try:
            yield client
        except ClientError as exc:
            unreachable = isinstance(exc.__cause__, httpx.TransportError)
            if unreachable and hint is not None and StoreLayout(hint).is_store():
                raise ClientError(
                    f"{exc}\nfor the runs of `simrun run` in {hint}, add --store {hint}"
                ) from exc
            raise
        finally:
            client.close()

    def read(self, read: Callable[[StoreReader], Awaitable[T]], ask: Callable[[Client], T]) -> T:
        """``read`` of the store, else ``ask`` of the service."""
        store = self.store
        if store is None:
            with self.service() as client:
                return ask(client)
        from simrun.local.reads import open_store_reader

        async def main() -> T:
            async with open_store_reader(store) as reader:
                return await read(reader)

        return asyncio.run(main())


def store_or_service(help_text: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--url``, ``--token`` and ``--store`` (``help_text``) given to the command as one
    `Where` (``where``)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def wrapper(
            *args: Any, url: str, token: str | None, store: Path | None, store_hint: Path,
            **kwargs: Any,
        ) -> None:  # fmt: skip
            where = Where(url, token, local_store(store, store_hint), store_hint)
            command(*args, where=where, **kwargs)

        for add_option in (STORE_HINT, read_store_option(help_text), TOKEN, URL):
            wrapper = add_option(wrapper)
        return wrapper

    return decorate


def _exit(code: int) -> None:
    if code:
        sys.exit(code)


async def _watch(reader: Reader, run_id: str, where: Sequence[str], every_s: float) -> int:
    """Follow ``run_id`` to its end and print how it ended (``where``: the options that
    name its store or service in the commands it prints)."""
    from simrun.app.follow import RemoteReader, follow, watch_remote
    from simrun.cli.progress import make_view, report_end

    out = console()
    view = make_view(out, every_s)
    if isinstance(reader, RemoteReader):
        err = err_console()
        outcome = await watch_remote(
            reader.client, run_id, view, poll_s=POLL_S, note=lambda t: err.print(t, markup=False)
        )
    else:
        outcome = await follow(lambda: _view(reader, run_id), view, poll_s=POLL_S)
    failures = await reader.failures(run_id)
    replay_cmd = shell_join(["simrun", "replay", run_id, *where])
    return report_end(out, outcome.run, failures, replay_cmd, logs_where=where)


def _after(client: Client, run_id: str, url: str, wait: bool, every_s: float) -> None:
    """Follow ``run_id`` of the service to its end and exit as it ended (``wait``), else
    say how to."""
    if not wait:
        command = shell_join(["simrun", "status", run_id, "--watch", *url_args(url)])
        console().print(f"follow it: {command}", markup=False, soft_wrap=True)
        return
    from simrun.app.follow import RemoteReader

    _exit(asyncio.run(_watch(RemoteReader(client), run_id, url_args(url), every_s)))


def _live_pool(client: Client) -> tuple[tuple[WorkerCapacity, ...] | None, str]:
    """The live workers the service tells of (None when it cannot tell), as text too."""
    from simrun.client import ClientError
    from simrun.core.forecast import live_pool, pool_text
    from simrun.core.scaling import parse_backlog

    try:
        pool = live_pool(parse_backlog(client.backlog()))
    except (ClientError, ValueError):
        return None, "unknown: the service does not tell its workers"
    if not pool:
        return pool, "no live worker"
    shapes = Counter((w.queues, w.memory_gb, w.processes) for w in pool)
    return pool, "live: " + "; ".join(
        f"{queues[0]}: {pool_text(count, processes, memory_gb)}"
        for (queues, memory_gb, processes), count in sorted(shapes.items())
    )


@click.command()
@click.argument("workflow", type=click.Path(path_type=Path, dir_okay=False))
@URL
@TOKEN
@click.option("--wait", is_flag=True, help="Follow the run until it ends; exit as it ended.")
@click.option("--dry-run", is_flag=True, help="Check, count and forecast; submit nothing.")
@PLUGINS
@SET
@NO_REUSE
@RERUN
@click.option("--workers", type=click.IntRange(1), default=None, help="Pool to forecast on.")
@container_processes_option("… its processes each.")
@worker_memory_option("… its memory each (GiB).")
@EVERY_S
def submit(
    workflow: Path,
    url: str,
    token: str | None,
    wait: bool,
    dry_run: bool,
    plugins: tuple[str, ...],
    overrides: tuple[SettingOverride, ...],
    reuse: bool,
    rerun: tuple[str, ...],
    workers: int | None,
    processes: int | None,
    worker_memory_gb: float | None,
    every_s: float,
) -> None:
    """Send WORKFLOW and its source files to the service.

    The task types installed here (and --plugins) plan their tasks first and count their
    units for --dry-run; the service checks the rest.
    """
    from simrun.app.prepare import prepare_to_send
    from simrun.client import Client

    prepared, types = prepare_to_send(workflow, plugins, overrides=overrides)
    with Client(url, token) as client:
        if dry_run:
            sys.exit(_dry_run(client, prepared.doc, types, workers, processes, worker_memory_gb))
        run_id = client.submit(prepared.text, prepared.sources(), reuse=reuse, rerun=rerun)
        console().print(f"run {run_id} submitted")
        _after(client, run_id, url, wait, every_s)


def _dry_run(
    client: Client,
    doc: Workflow,
    types: Mapping[str, TaskType],
    workers: int | None,
    processes: int | None,
    worker_memory_gb: float | None,
) -> int:
    """``simrun submit --dry-run``: the forecast on the pool given, else on the live one."""
    from simrun.app.plans import summaries_resolver, task_plans
    from simrun.cli.dryrun import dry_run_exit, print_forecast
    from simrun.core.forecast import pool_of, pool_text

    out = console()
    rows = asyncio.run(task_plans(doc, types, summaries_resolver(client.resources())))
    pool: tuple[WorkerCapacity, ...] | None
    if workers is not None or processes is not None or worker_memory_gb is not None:
        if workers is None or processes is None or worker_memory_gb is None:
            raise click.UsageError(
                "a pool to forecast on needs --workers, --processes and --worker-memory-gb"
            )
        pool = pool_of(workers, processes, worker_memory_gb)
        text = f"{pool_text(workers, processes, worker_memory_gb)} (given)"
    else:
        pool, text = _live_pool(client)
    result = print_forecast(out, rows, pool, text)
    return dry_run_exit(out, result, "dry run: nothing was submitted")


@click.command()
@click.argument("run_id", metavar="[RUN]", required=False)
@store_or_service("Read the store of `simrun run` here instead of asking a service.")
@click.option("--watch", is_flag=True, help="Follow the run until it ends; exit as it ended.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@EVERY_S
def status(run_id: str | None, where: Where, watch: bool, as_json: bool, every_s: float) -> None:
    """Show RUN (its tasks: units, time, memory per process requested and at its peak,
    kills for memory; while it runs, its progress and ETA), or the latest runs without
    RUN."""
    if watch and run_id is None:
        raise click.UsageError("--watch needs a RUN to follow")
    if watch and as_json:
        raise click.UsageError("--watch shows the run as it goes; --json prints it once")

    from simrun.app.follow import RemoteReader

    async def show(reader: Reader) -> int:
        if run_id is None:
            return await _show_runs(reader, as_json)
        if watch:
            return await _watch(reader, run_id, where.args(), every_s)
        return await _show_run(reader, run_id, as_json, where.store)

    _exit(where.read(show, lambda c: asyncio.run(show(RemoteReader(c)))))


async def _show_runs(reader: Reader, as_json: bool) -> int:
    """``simrun status``: the latest runs."""
    from simrun.cli.tables import RUN_COLUMNS, run_rows, table

    runs = await reader.runs()
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in runs], indent=2))
    elif not runs:
        console().print("no runs yet")
    else:
        console().print(table(RUN_COLUMNS, run_rows(runs, time.time())))
    return 0


async def _view(reader: Reader, run_id: str) -> RunView:
    data = await reader.run(run_id)
    if data is None:
        raise LocalError(f"there is no run {run_id!r}")
    return data


async def _show_run(reader: Reader, run_id: str, as_json: bool, store: Path | None) -> int:
    """``simrun status RUN``: the run, its tasks and its failures."""
    from simrun.cli import progress
    from simrun.core.states import INTERRUPTED

    data = await _view(reader, run_id)
    failures = await reader.failures(run_id) if data.state != "running" else []
    if as_json:
        failed = [f.to_dict() for f in failures]
        click.echo(json.dumps({**data.to_dict(), "failures": failed}, indent=2))
        return 0
    out, now = console(), time.time()
    if data.state != "running":
        out.print(progress.run_header(data), markup=False, highlight=False, soft_wrap=True)
    elif out.is_terminal:
        out.print(progress.render_live(data, now_s=now))
    else:
        click.echo(progress.run_header(data))
        for line in progress.plain_lines(data, only_active=False, now_s=now):
            click.echo(line)
    out.print(progress.summary_table(data, now_s=now))
    for line in progress.failure_lines(failures):
        out.print(f"  {line}", markup=False, soft_wrap=True)
    if store is not None and data.state == INTERRUPTED:
        resume = shell_join(["simrun", "run", "--resume", run_id, "--store", str(store)])
        drop = shell_join(["simrun", "cancel", run_id, "--store", str(store)])
        out.print(f"its `simrun run` is gone; go on: {resume}; or drop: {drop}",
                  markup=False, soft_wrap=True)  # fmt: skip
    return 0


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--task", default=None, help="Only the failed units of this task.")
@click.option("--unit", "units", multiple=True, type=click.IntRange(0),
              help="Only this failed unit of --task (repeatable).")  # fmt: skip
@click.option("--memory-gb", type=click.FloatRange(0, min_open=True), default=None,
              help="Memory per process of the replayed tasks, GiB.")  # fmt: skip
@click.option("--all", "rerun", is_flag=True,
              help="With --task: run the task again, done units too, and the tasks reading "
                   "it.")  # fmt: skip
@URL
@TOKEN
@read_store_option("Finish a run of `simrun run` here: start the embedded service on this store.")
@option(LocalOptions, "redis_url")
@click.option("--wait", is_flag=True, help="Follow the run until it ends (always with --store).")
@PLUGINS
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="With --store: worker containers to start.")  # fmt: skip
@container_processes_option("With --store: processes per container [default: CPUs / workers].")
@worker_memory_option("With --store: memory per container [default: 80% of free memory].")
@EVERY_S
def replay(
    run_id: str,
    task: str | None,
    units: tuple[int, ...],
    memory_gb: float | None,
    rerun: bool,
    url: str,
    token: str | None,
    store: Path | None,
    redis_url: str | None,
    wait: bool,
    plugins: tuple[str, ...],
    workers: int,
    processes: int | None,
    worker_memory_gb: float | None,
    every_s: float,
) -> None:
    """Put the failed units of RUN back in the queue (all, of --task, or --unit I of it);
    the units that were done are kept and never computed again. With --task T --all, T
    runs again from the start, done units too, and so does every task reading its outputs
    (directly or not); the run runs again.

    With --store, the run is one of `simrun run`: the embedded service starts again on that
    store, finishes the run (an interrupted one goes on where it stopped) and exits as the
    run ended.
    """
    if units and task is None:
        raise click.UsageError("--unit needs --task: the task whose units to replay")
    if rerun and (task is None or units):
        raise click.UsageError("--all needs --task (the task to run again) and no --unit")
    if store is not None:
        from simrun.cli.run import embedded
        from simrun.local.start import ReplayRequest, ready_session

        types = load_types_from_here(plugins)
        request = ReplayRequest(task, units, memory_gb, rerun=rerun)
        settings = LocalOptions(store, redis_url, token, workers, processes, plugins=plugins,
                                memory_gb=worker_memory_gb, go_on_with=run_id)  # fmt: skip
        options, pool = asyncio.run(ready_session(settings, types, replay=request))
        _exit(asyncio.run(embedded(options, types, pool, run_id=run_id, replay=request,
                                   every_s=every_s)))  # fmt: skip
        return
    if plugins:
        raise click.UsageError("--plugins is for --store (a service loads its own task types)")
    out = console()
    with Where(url, token).service() as client:
        if rerun and task is not None:
            from simrun.cli.run import rerun_line

            tasks, count = client.rerun(run_id, task, memory_gb)
            out.print(f"run {run_id}: {rerun_line(tasks, count)}")
        else:
            count = client.replay(run_id, task, list(units), memory_gb)
            out.print(f"run {run_id}: {count} failed units put back; the done ones are kept")
        _after(client, run_id, url, wait, every_s)


@click.command()
@click.argument("run_id", metavar="RUN")
@URL
@TOKEN
@read_store_option("Cancel an interrupted run of `simrun run` in this store (no service).")
def cancel(run_id: str, url: str, token: str | None, store: Path | None) -> None:
    """Cancel RUN: nothing more of it is dispatched; queued units are skipped.

    With --store, RUN is an interrupted run of `simrun run` (its session is gone): it is
    marked cancelled in the store, its done units kept."""
    if store is not None:
        in_flight = asyncio.run(_cancel_in_store(store, run_id))
    else:
        with Where(url, token).service() as client:
            in_flight = client.cancel(run_id)
    console().print(f"run {run_id} cancelled ({in_flight} units were in flight)")


async def _cancel_in_store(store: Path, run_id: str) -> int:
    """Cancel ``run_id`` in the store at ``store`` under its lock (`LocalError` while a
    session runs on it); the units that were in flight."""
    from simrun.local import lock
    from simrun.local.reads import store_db
    from simrun.runstore.rows import RunStateError, UnknownRunError
    from simrun.runstore.store import RunStore

    db = store_db(store)
    held = lock.take(store)
    try:
        runs = await RunStore.open(db)
        try:
            return len(await runs.cancel(run_id, time.time()))
        except (UnknownRunError, RunStateError) as exc:
            raise LocalError(f"{exc} (in {store})") from exc
        finally:
            await runs.close()
    finally:
        held.close()


@click.command()
@click.argument("key", metavar="[KEY]", required=False)
@store_or_service("Read what the store of `simrun run` learned instead of asking a service.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With KEY: also write the histogram of its peaks to this PNG "
                   "(needs simrun[plot]).")  # fmt: skip
def resources(key: str | None, where: Where, as_json: bool, plot: Path | None) -> None:
    """What is learned per resource key: samples, typical peak, request, speed, last kill.

    With KEY (task_type/model or task_type/model/variant, as listed): the evidence of that
    key: its request and why, its samples and their spread, the margin, its kills, and a
    histogram of its peaks with the request marked.
    """
    if key is not None:
        _exit(_key_evidence(key, where, as_json, plot))
        return
    if plot is not None:
        raise click.UsageError("--plot draws the peaks of one key: give a KEY")
    from simrun.cli.tables import RESOURCE_COLUMNS, resource_rows, table

    async def from_store(reader: StoreReader) -> list[dict[str, Any]]:
        hints = {name: t.hint for name, t in load_types_from_here().items()}
        summaries = await reader.resources.summaries(hints)
        return [{**asdict(summary), "key": summary.key.text()} for summary in summaries]

    rows = where.read(from_store, lambda c: c.resources())
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    out = console()
    if not rows:
        out.print("nothing learned yet: resources are learned from the runs' reports")
        return
    out.print(table(RESOURCE_COLUMNS, resource_rows(rows, time.time())))


def _key_evidence(key: str, where: Where, as_json: bool, plot: Path | None) -> int:
    """``simrun resources KEY``: the evidence of one key, from a store or a service."""
    import importlib.util

    from simrun.cli.evidence import evidence_lines, write_plot

    if plot is not None and importlib.util.find_spec("matplotlib") is None:
        err_console().print(
            "--plot needs matplotlib: pip install 'simrun[plot]'", markup=False, soft_wrap=True
        )
        return 1

    async def from_store(reader: StoreReader) -> dict[str, Any]:
        from simrun.plugins import ResourceHint
        from simrun.resources import ResourceKey
        from simrun.resources.keys import unknown_key_message

        try:
            parsed: ResourceKey | None = ResourceKey.from_text(key)
        except ValueError:
            parsed = None
        if parsed is not None:
            task_type = load_types_from_here(only=[parsed.task_type]).get(parsed.task_type)
            hint = task_type.hint if task_type is not None else ResourceHint()
            found = await reader.resources.evidence(parsed, hint)
            if found.observations:
                return found.to_dict()
        known = [k.text() for k in await reader.resources.keys()]
        raise LocalError(unknown_key_message(key, known))

    data = where.read(from_store, lambda c: c.resource_evidence(key))
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        out = console()
        bar = "█" if (out.encoding or "").lower().startswith("utf") else "#"
        for line in evidence_lines(data, bar=bar):
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    if plot is not None:
        write_plot(data, plot)
        err_console().print(f"wrote {plot}", markup=False, soft_wrap=True)
    return 0
