"""The tables of the command line without borders (`table`), and the rows of those
``simrun status`` (without a run) and ``simrun resources`` print (the clock an argument)."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from simrun.cli.progress import format_duration, format_gb, format_rate
from simrun.core.views import RunSummary, running_seconds

RUN_COLUMNS = ("run", "name", "state", "submitted", "took", "message")
RESOURCE_COLUMNS = (
    "key", "samples", "typical/process", "requested", "speed", "source", "last kill",
)  # fmt: skip


def table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], left: Collection[str] | None = None
) -> Table:
    """A table without borders; ``left``: the columns justified left (None: all), the
    others right and unwrapped."""
    out = Table(show_edge=False, pad_edge=False, box=None)
    for column in columns:
        at_left = left is None or column in left
        out.add_column(column, justify="left" if at_left else "right", no_wrap=not at_left)
    for row in rows:
        out.add_row(*(escape(cell) for cell in row))
    return out


def local_time(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix_s))


def run_rows(runs: Sequence[RunSummary], now_s: float) -> list[tuple[str, ...]]:
    """Per run: id, name, state, submitted, how long it took (so far), message."""
    rows: list[tuple[str, ...]] = []
    for r in runs:
        end = r.finished_s or (now_s if r.state in ("running", "interrupted") else r.updated_s)
        rows.append(
            (
                r.id,
                r.name or "",
                r.state,
                local_time(r.created_s),
                format_duration(running_seconds(r.created_s, end, r.pauses)),
                r.message,
            )
        )
    return rows


def resource_rows(summaries: Sequence[Mapping[str, Any]], now_s: float) -> list[tuple[str, ...]]:
    """Per resource key: samples of observations, typical peak, request, speed, its source
    and the last kill for memory."""
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        kill_s, kill_gb = s.get("last_kill_s"), s.get("last_kill_gb")
        kill = "—"
        if kill_s is not None:
            kill = f"{format_duration(now_s - float(kill_s))} ago at {format_gb(kill_gb)}"
        rows.append(
            (
                str(s["key"]),
                f"{s.get('samples', 0)} of {s.get('observations', 0)}",
                format_gb(s.get("typical_gb")),
                format_gb(s.get("requested_gb")),
                format_rate(s.get("seconds_per_unit")),
                str(s.get("source") or ""),
                kill,
            )
        )
    return rows
