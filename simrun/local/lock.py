"""The lock of a store (an advisory ``flock`` of ``STORE/.simrun.lock``, released however its
holder ends): an embedded session holds it, so two never drive one SQLite file, and a reader
tells a run that goes on from an interrupted one."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from simrun.core.layout import StoreLayout
from simrun.local.machine import LocalError


def take(store: Path) -> IO[str]:
    """Lock ``store`` (made when missing): the open lock file, whose closing releases it.
    `LocalError` when another session holds it."""
    store.mkdir(parents=True, exist_ok=True)
    lock = StoreLayout(store).lock.open("a+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        who = lock.read().strip() or "another process"
        lock.close()
        raise LocalError(_in_use(store, who)) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    return lock


def holder(store: Path) -> str | None:
    """Who holds the lock of ``store`` (``pid N``), or None when no session runs on it."""
    path = StoreLayout(store).lock
    try:
        lock = path.open("r")
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock.read().strip() or "another process"
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        return None


def check_free(store: Path) -> None:
    """`LocalError` when a session holds the lock of ``store``."""
    who = holder(store)
    if who is not None:
        raise LocalError(_in_use(store, who))


def _in_use(store: Path, who: str) -> str:
    return (
        f"the store {store} is in use by another `simrun run` ({who}); "
        "wait for it to end, or give this one another --store"
    )
