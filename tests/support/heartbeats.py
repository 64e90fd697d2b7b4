"""What a worker container says in its heartbeat, built for tests: `worker_info`."""

from __future__ import annotations

from typing import Any

from simrun.core.reports import RunningJob, WorkerInfo


def worker_info(
    worker_id: str = "w1",
    *,
    memory_gb: float = 8.0,
    processes: int = 2,
    free_memory_gb: float | None = None,
    free_processes: int | None = None,
    queues: tuple[str, ...] = ("cpu",),
    gpus: int = 0,
    running: tuple[RunningJob, ...] = (),
    host: str = "h",
    pid: int = 1,
    started: float = 0.0,
    updated: float = 0.0,
    **more: Any,
) -> WorkerInfo:
    """A worker's heartbeat info; free memory and processes are all of them unless given."""
    return WorkerInfo(
        id=worker_id,
        queues=queues,
        memory_gb=memory_gb,
        processes=processes,
        gpus=gpus,
        free_memory_gb=memory_gb if free_memory_gb is None else free_memory_gb,
        free_processes=processes if free_processes is None else free_processes,
        running=running,
        host=host,
        pid=pid,
        started=started,
        updated=updated,
        **more,
    )
