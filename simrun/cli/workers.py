"""``simrun workers``: the live worker containers the service sees (``GET /workers``), with
the skew of their clocks against Redis's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from simrun.cli.common import console
from simrun.cli.options import TOKEN, URL
from simrun.cli.progress import format_gb
from simrun.cli.tables import table
from simrun.client import Client, ClientError

COLUMNS = ("worker", "host", "queues", "busy", "memory", "jobs", "clock", "warning")


def _skew(value: Any) -> str:
    return "?" if value is None else f"{float(value):+.1f} s"


def worker_rows(workers: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """Per worker of the workers document: id, host, queues, busy processes, memory in use,
    jobs (stopping), clock skew against Redis, and its warning (the service's words)."""
    rows: list[tuple[str, ...]] = []
    for w in sorted(workers, key=lambda w: str(w.get("id"))):
        used = w.get("used_memory_gb")
        memory = f"{'?' if used is None else format_gb(float(used))} of {format_gb(w['memory_gb'])}"
        jobs = f"{len(w.get('running') or ())}{', stopping' if w.get('stopping') else ''}"
        rows.append(
            (
                str(w["id"]),
                str(w.get("host", "")),
                ",".join(w.get("queues") or ()) or "-",
                f"{w['processes'] - w['free_processes']}/{w['processes']}",
                memory,
                jobs,
                _skew(w.get("clock_skew_s")),
                str(w.get("clock_warning") or ""),
            )
        )
    return rows


@click.command()
@URL
@TOKEN
def workers(url: str, token: str | None) -> None:
    """The live worker containers, their load and the skew of their clocks.

    The clock column is the worker's clock minus the Redis server's, measured at its last
    heartbeat; past a few seconds the warning column says so.
    """
    try:
        with Client(url, token) as client:
            document = client.workers()
    except ClientError as exc:
        raise click.ClickException(str(exc)) from exc
    live = document.get("workers") or []
    out = console()
    if not live:
        out.print("no live worker", markup=False)
        return
    out.print(table(COLUMNS, worker_rows(live), left=("worker", "host", "queues", "warning")))


if __name__ == "__main__":
    workers(prog_name="simrun workers")
