"""simrun: run simulation campaigns whose tasks split into units, with learned memory.

Its names are `SimrunError` (the base of every exception simrun raises on purpose), the
spec of a task type (`simrun.plugins`) and the Python API (`simrun.api`); the last two are
imported when first asked for: ``simrun --help`` pays for neither."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from simrun.errors import SimrunError

if TYPE_CHECKING:
    from simrun.api import (
        InterruptedRuns,
        LocalError,
        LocalSession,
        Run,
        RunResult,
        RunTimeout,
        WorkflowError,
        run_local,
        submit,
    )
    from simrun.plugins import (
        ENTRY_POINT_GROUP,
        ResourceHint,
        TaskPaths,
        TaskType,
        load_task_types,
        resolve,
    )

__all__ = [
    "ENTRY_POINT_GROUP",
    "InterruptedRuns",
    "LocalError",
    "LocalSession",
    "ResourceHint",
    "Run",
    "RunResult",
    "RunTimeout",
    "SimrunError",
    "TaskPaths",
    "TaskType",
    "WorkflowError",
    "load_task_types",
    "resolve",
    "run_local",
    "submit",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'simrun' has no attribute {name!r}")
    plugins = importlib.import_module("simrun.plugins")
    if hasattr(plugins, name):
        return getattr(plugins, name)
    return getattr(importlib.import_module("simrun.api"), name)
