"""Loading the task types of this machine (light: ``simrun --help`` imports it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simrun.plugins import TaskType


def load_types_from_here(
    plugins: Sequence[str] = (), *, only: Collection[str] | None = None
) -> dict[str, TaskType]:
    """The installed task types (with ``only``, those named) and those of ``plugins``,
    imported with the current directory on the path (as ``python -m`` would)."""
    from simrun.plugins import (
        ENTRY_POINT_GROUP,
        PluginError,
        load_plugin_ref,
        load_task_types,
        load_types,
    )

    try:
        if plugins:
            cwd = os.getcwd()
            if cwd not in sys.path:
                sys.path.insert(0, cwd)
        if only is None:
            return load_types(plugins)
        from importlib.metadata import entry_points

        chosen = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name in only]
        types = load_task_types(chosen)
        for ref in plugins:
            task_type = load_plugin_ref(ref)
            types[task_type.name] = task_type
        return types
    except ValueError as exc:  # two entry points of one name
        if isinstance(exc, PluginError):
            raise
        raise PluginError(str(exc)) from exc
