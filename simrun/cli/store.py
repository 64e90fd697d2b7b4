"""``simrun store``: the store's database file, checked without writing to it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from simrun import db
from simrun.core.layout import StoreLayout
from simrun.resources.store import COMPONENT as RESOURCES
from simrun.resources.store import MIGRATIONS as RESOURCE_MIGRATIONS
from simrun.runstore.schema import COMPONENT as RUNS
from simrun.runstore.schema import MIGRATIONS as RUN_MIGRATIONS

#: The schema version of each component of the file that this simrun knows.
KNOWN = {RUNS: len(RUN_MIGRATIONS), RESOURCES: len(RESOURCE_MIGRATIONS)}


@click.group("store")
def store() -> None:
    """Check a store's database file (a store of `simrun run` or `simrun service`)."""


@store.command("check")
@click.argument("path", type=click.Path(path_type=Path))
def check(path: Path) -> None:
    """Check the database of the store PATH (or the database file PATH, a service's --db)
    without writing to it: SQLite's integrity check and the schema versions.

    Prints ok and exits 0, or prints what is wrong and exits 1. A damaged file is left as
    it is (the service and `simrun run` refuse it): restore it from a backup."""
    layout = StoreLayout(path)
    found = db.check_file(layout.db if path.is_dir() else path, KNOWN)
    for line in report(found):
        click.echo(line)
    holder = db.holder_of(layout.lock) if path.is_dir() else None
    if holder is not None:
        click.echo(f"the store is in use by {db.shown_holder(holder)} (checked as it writes it)")
    sys.exit(0 if found.ok else 1)


def report(found: db.FileCheck) -> list[str]:
    """The lines `check` prints of ``found``."""
    versions = ", ".join(
        f"{c} {v}"
        + ("" if v >= KNOWN.get(c, v) else f" (upgraded to {KNOWN[c]} at the next start)")
        for c, v in sorted(found.versions.items())
    )
    if found.ok:
        return [f"{found.path}: ok (integrity check ok; schema: {versions or 'none yet'})"]
    lines = [f"{found.path}: NOT ok"]
    lines += [f"  {problem}" for problem in found.problems]
    if found.path.is_file():
        lines.append("restore it from a backup, or move it away to start with an empty one")
    return lines
