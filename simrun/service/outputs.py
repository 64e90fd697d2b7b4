"""The outputs of tasks that run again from the start, removed before they run."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from simrun.core.layout import StoreLayout

log = logging.getLogger(__name__)


def clear_outputs(store: Path, run: str, tasks: Sequence[str]) -> list[str]:
    """Empty the output directory of each of ``tasks`` (blocking; a failure is logged): the
    tasks whose directory held something."""
    cleared: list[str] = []
    for task in tasks:
        out = StoreLayout(store).task_out(run, task)
        if not out.is_dir() or not any(out.iterdir()):
            continue
        try:
            shutil.rmtree(out)
            out.mkdir(parents=True)
        except OSError as exc:
            log.warning(
                "run %s task %s runs again, but its earlier outputs in %s stay: %s",
                run,
                task,
                out,
                exc,
            )
            continue
        cleared.append(task)
    return cleared
