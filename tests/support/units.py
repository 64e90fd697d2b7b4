"""Readings of what the units of the test task types did (tests/support/tasks.py and
service_tasks.py): each unit that completes writes ``unit-<index>.json``; each computation
of an ``svc-work`` unit also appends a line to ``calls-<index>.log``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _index(path: Path) -> int:
    return int(path.stem.split("-")[1])


def unit_records(out: Path) -> dict[int, dict[str, Any]]:
    """The ``unit-<i>.json`` records in the output directory ``out``, by index."""
    return {_index(p): json.loads(p.read_text()) for p in sorted(out.glob("unit-*.json"))}


def done_units(out: Path) -> set[int]:
    """The indices of the units that wrote their record."""
    return {_index(p) for p in out.glob("unit-*.json")}


def calls(out: Path) -> dict[int, int]:
    """How often each unit of an ``svc-work`` task was computed (from its call logs)."""
    return {_index(p): len(p.read_text().splitlines()) for p in sorted(out.glob("calls-*.log"))}
