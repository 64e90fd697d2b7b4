"""simrun: run simulation campaigns whose tasks split into units, with learned memory.

`SimrunError`, the base of every exception simrun raises on purpose, and two groups of
names, each imported when first asked for (PEP 562), so that a command that never loads a
task type (``simrun --help``) pays for neither:

* the spec of a task type, from `simrun.plugins`;
* the Python API, from `simrun.api`: `submit` a workflow to a service, or `run_local` it
  (or a `LocalSession`) on this machine, and wait for a `RunResult`."""

from __future__ import annotations

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

_PLUGINS = (
    "ENTRY_POINT_GROUP",
    "ResourceHint",
    "TaskPaths",
    "TaskType",
    "load_task_types",
    "resolve",
)
_API = (
    "InterruptedRuns",
    "LocalError",
    "LocalSession",
    "Run",
    "RunResult",
    "RunTimeout",
    "WorkflowError",
    "run_local",
    "submit",
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
    if name in _PLUGINS:
        from simrun import plugins

        return getattr(plugins, name)
    if name in _API:
        from simrun import api

        return getattr(api, name)
    raise AttributeError(f"module 'simrun' has no attribute {name!r}")
