"""Every name of the public API (../shared/spec/plugins.txt and resources.txt) imports from
the module the spec puts it in, whatever the layout of the packages behind it."""

from __future__ import annotations

import importlib

import pytest

SPEC_NAMES = [
    ("simrun.plugins", "ResourceHint"),
    ("simrun.plugins", "TaskPaths"),
    ("simrun.plugins", "TaskType"),
    ("simrun.plugins", "resolve"),
    ("simrun.plugins", "load_task_types"),
    ("simrun.plugins", "ENTRY_POINT_GROUP"),
    ("simrun.resources", "ResourceKey"),
    ("simrun.resources", "ResolvedResources"),
    ("simrun.resources", "ResourceStore"),
    ("simrun.resources", "resource_key"),
    ("simrun.resources", "WINDOW"),
    ("simrun.resources", "MARGIN"),
    ("simrun.resources", "RETRY_FACTOR"),
    ("simrun.worker", "MemorySampler"),
    ("simrun.worker", "WorkerReport"),
    ("simrun.worker", "exec_main"),
    ("simrun.service.controller", "is_oom"),
    ("simrun.client", "plan_tasks"),
]


@pytest.mark.parametrize(("module", "name"), SPEC_NAMES)
def test_a_spec_name_imports_from_where_the_spec_puts_it(module: str, name: str) -> None:
    """``from <module> import <name>`` works for every name the spec places."""
    assert hasattr(importlib.import_module(module), name), f"{module}.{name} is missing"


def test_the_methods_the_spec_names_exist() -> None:
    """`ResourceStore.record` and `ResourceStore.resolve` are the spec's store methods."""
    from simrun.resources import ResourceStore

    assert callable(ResourceStore.record)
    assert callable(ResourceStore.resolve)
