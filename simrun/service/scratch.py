"""The scratch of tasks that ended: the service marks a done task in Redis
(`mark_task_ended`), and each worker removes the scratch of the marked tasks it holds no
job of; `remove_scratch` removes what older workers left in the store.
"""

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

#: How long the mark of a task that ended stays in Redis: the workers look at every
#: heartbeat; one away longer removes the scratch as idle.
ENDED_TTL_S = 300


async def mark_task_ended(redis: Redis, keys: Keys, run: str, task: str) -> None:
    """Tell the workers that task ``task`` of run ``run`` ended (its scratch may go); a
    Redis error is logged: the workers then remove the scratch as idle."""
    try:
        await redis.set(keys.task_ended(run, task), "1", ex=ENDED_TTL_S)
    except RedisError as exc:
        log.warning("cannot tell the workers that task %s/%s ended: %s", run, task, exc)


async def unmark_tasks_ended(redis: Redis, keys: Keys, run: str, tasks: Sequence[str]) -> None:
    """Take back the marks of ``tasks`` of run ``run`` (they run again: `simrun rerun`), so
    that workers do not remove their new scratch between two jobs; a Redis error is logged
    (the mark expires within `ENDED_TTL_S`)."""
    if not tasks:
        return
    try:
        await redis.delete(*(keys.task_ended(run, task) for task in tasks))
    except RedisError as exc:
        log.warning("cannot take back the end marks of %s/%s: %s", run, list(tasks), exc)


def remove_scratch(store: Path, run: str, task: str) -> bool:
    """Remove the scratch directory of task ``task`` of run ``run`` that an older worker left
    in the store (blocking: call it in a thread); whether it existed. A failure is logged,
    never raised: the task is done."""
    paths = StoreLayout(store).task_paths(run, task)
    found = False
    # what an older worker left, and the checkpoints of units (`TaskPaths.checkpoint`)
    for directory in (paths.scratch, paths.checkpoint(0).parent):
        if not directory.exists():
            continue
        found = True
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            log.warning("cannot remove %s of a task that is done: %s", directory, exc)
    return found
