"""The outputs of tasks that run again (``simrun replay RUN --task T --all``): removed
before they run, so a file the earlier attempt wrote is never taken for a new one.

A task that runs again from the start (`simrun.runstore.RunStore.rerun`: the task and the
tasks that read it) gets an empty output directory (`simrun.core.layout.StoreLayout.
task_out`): its units, its merge or its command write everything again. Outputs hard-linked
from an earlier run (reuse) lose only this run's links; the earlier run keeps its files.
The logs of earlier attempts stay (`simrun logs` shows them).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from simrun.core.layout import StoreLayout

log = logging.getLogger(__name__)


def clear_outputs(store: Path, run: str, tasks: Sequence[str]) -> list[str]:
    """Empty the output directory of each of ``tasks`` of run ``run`` (blocking: call it in
    a thread); the tasks whose directory held something. A directory that cannot be
    emptied is logged (the task runs again all the same, writing over what is left)."""
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
