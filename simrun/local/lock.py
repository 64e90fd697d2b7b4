"""The lock of a store (an advisory ``flock`` of ``STORE/.simrun.lock``, released however its
holder ends, `simrun.db.hold`): an embedded session holds it, and so does ``simrun
service``, so two never drive one SQLite file, and a reader tells a run that goes on from an
interrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from simrun import db
from simrun.core.layout import StoreLayout
from simrun.local.machine import LocalError


def take(store: Path, command: str = "simrun run") -> IO[str]:
    """Lock ``store`` (made when missing) for this process, running ``command``: the open
    lock file, whose closing releases it. `LocalError` when another process holds it."""
    try:
        return db.hold(StoreLayout(store).lock, db.holder_line(f"`{command}`"))
    except db.FileInUse as exc:
        raise LocalError(_in_use(store, exc.holder)) from None


def holder(store: Path) -> str | None:
    """Who holds the lock of ``store`` (``simrun run (pid N on host H since T)``), or None
    when nothing runs on it."""
    return db.holder_of(StoreLayout(store).lock)


def check_free(store: Path) -> None:
    """`LocalError` when a session or a service holds the lock of ``store``."""
    who = holder(store)
    if who is not None:
        raise LocalError(_in_use(store, who))


def _in_use(store: Path, who: str) -> str:
    return (
        f"the store {store} is in use by another {db.shown_holder(who)}; "
        "wait for it to end, or give this one another --store"
    )
