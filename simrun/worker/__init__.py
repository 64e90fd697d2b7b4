"""The computing side: a worker container (`container`) takes jobs from its queues
(`jobs`), admits them by memory (`admission`, within its `capacity`), runs chunks and
merges on its pool of worker processes (`pool`) and commands through ``simrun-exec``
(`command`, `exec`), measures them (`sampler`, `ledger`) and reports; `heartbeat` tells the
service it is alive and `health` is the container's health check.

The names below are imported when first used, not with the package: a worker process
(`simrun.worker.pool.child`) imports this package too, and every one it starts, a process
recycled on a change of task included, would pay for the wire models and ``simrun-exec``
(about 0.1 s of a core)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simrun.core.reports import WorkerReport
    from simrun.worker.exec.main import exec_main
    from simrun.worker.sampler import MemorySampler

__all__ = ["MemorySampler", "WorkerReport", "exec_main"]

_MODULES = {
    "MemorySampler": "simrun.worker.sampler",
    "WorkerReport": "simrun.core.reports",
    "exec_main": "simrun.worker.exec.main",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
