"""The computing side: a worker container (`container`) takes jobs from its queues (`jobs`),
admits them by memory (`admission`), runs them on its pool (`pool`) or through simrun-exec
(`command`, `exec`), and reports. Names here are lazy: every worker process imports this."""

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
