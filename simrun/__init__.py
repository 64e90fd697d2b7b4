"""simrun: run simulation campaigns whose tasks split into units, with learned memory."""

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
