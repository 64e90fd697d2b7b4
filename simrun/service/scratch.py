"""The scratch of tasks that ended: marked in Redis for the workers to remove, and removed
from the store."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from simrun.core.layout import StoreLayout
from simrun.queues.keys import Keys

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

#: How long the mark of a task that ended stays in Redis (a worker away longer removes the
#: scratch as idle).
ENDED_TTL_S = 300


async def mark_task_ended(redis: Redis, keys: Keys, run: str, task: str) -> None:
    """Tell the workers that a task ended (its scratch may go); a Redis error is logged."""
    try:
        await redis.set(keys.task_ended(run, task), "1", ex=ENDED_TTL_S)
    except RedisError as exc:
        log.warning("cannot tell the workers that task %s/%s ended: %s", run, task, exc)


async def unmark_tasks_ended(redis: Redis, keys: Keys, run: str, tasks: Sequence[str]) -> None:
    """Take back the marks of ``tasks`` that run again (a Redis error is logged)."""
    if not tasks:
        return
    try:
        await redis.delete(*(keys.task_ended(run, task) for task in tasks))
    except RedisError as exc:
        log.warning("cannot take back the end marks of %s/%s: %s", run, list(tasks), exc)


def remove_scratch(store: Path, run: str, task: str) -> bool:
    """Remove what scratch and checkpoints a task left in the store (blocking; a failure is
    logged): whether there were any."""
    paths = StoreLayout(store).task_paths(run, task)
    found = False
    for directory in (paths.scratch, paths.checkpoint(0).parent):
        if not directory.exists():
            continue
        found = True
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            log.warning("cannot remove %s of a task that is done: %s", directory, exc)
    return found
