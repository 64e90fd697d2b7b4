"""Scratch directories of tasks that ended: removed when a task is done, kept when it failed.

A task's scratch directory (`simrun.plugins.TaskPaths.scratch`, ``STORE/runs/<run>/<task>/
scratch``) lives in the run store, next to its output, so every worker of the task sees the
same one; only the service knows when the task ends (`simrun.service.advance`), so it is
the service that removes it, in a thread, when the task is done. A failed (or cancelled)
task keeps it for debugging; delete ``STORE/runs/<run>/<task>/scratch`` by hand once done
with it (it is never read again: a task that runs again starts a new run).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from simrun.core.layout import StoreLayout

__all__ = ["remove_scratch"]

log = logging.getLogger(__name__)


def remove_scratch(store: Path, run: str, task: str) -> bool:
    """Remove the scratch directory of task ``task`` of run ``run`` (blocking: call it in a
    thread); whether it existed. A failure is logged, never raised: the task is done."""
    scratch = StoreLayout(store).task_paths(run, task).scratch
    if not scratch.exists():
        return False
    try:
        shutil.rmtree(scratch)
    except OSError as exc:
        log.warning(
            "cannot remove the scratch directory %s of a task that is done: %s", scratch, exc
        )
        return False
    return True
