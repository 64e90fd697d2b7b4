"""simrun: run simulation campaigns whose tasks split into units, with learned memory.

The names below are those of `simrun.plugins`, imported when first asked for, so a command
that never loads a task type (``simrun --help``) does not pay for pydantic and the entry
points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    "ResourceHint",
    "TaskPaths",
    "TaskType",
    "load_task_types",
    "resolve",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from simrun import plugins

        return getattr(plugins, name)
    raise AttributeError(f"module 'simrun' has no attribute {name!r}")
