"""The public surface of simrun is the spec's names (../shared/spec/) and the Python API's,
each listed once in the ``__all__`` of the module users import it from; every other module
is internal. A name added to or dropped from the surface is a decision: it changes this
test."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import simrun

PACKAGE = Path(simrun.__file__).parent

#: The modules users import from, and exactly what each exports.
PUBLIC = {
    "simrun": {
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
    },
    "simrun.api": {
        "InterruptedRuns",
        "LocalError",
        "LocalSession",
        "Run",
        "RunResult",
        "RunTimeout",
        "WorkflowError",
        "WorkflowInput",
        "run_local",
        "submit",
    },
    "simrun.plugins": {
        "ENTRY_POINT_GROUP",
        "ResourceHint",
        "TaskPaths",
        "TaskType",
        "UnitOutputs",
        "load_task_types",
        "resolve",
    },
    "simrun.resources": {
        "MARGIN",
        "RETRY_FACTOR",
        "WINDOW",
        "ResolvedResources",
        "ResourceKey",
        "ResourceStore",
        "resource_key",
    },
    "simrun.worker": {"MemorySampler", "WorkerReport", "exec_main"},
    "simrun.client": {"plan_tasks"},
    "simrun.service.controller": {"is_oom"},
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_public_module_exports_exactly_its_names(module: str) -> None:
    """Each public module's ``__all__`` is its listed names, and every one of them imports."""
    imported = importlib.import_module(module)
    assert set(imported.__all__) == PUBLIC[module]
    missing = [name for name in imported.__all__ if not hasattr(imported, name)]
    assert not missing, f"{module} lists names it does not have: {missing}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_internal_module_declares_a_public_surface() -> None:
    """No module outside the public ones has an ``__all__``: internal names are imported
    from where they are defined, not re-exported."""
    declaring = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                declaring.append(_module_name(path))
    assert sorted(set(declaring) - set(PUBLIC)) == []
    assert set(PUBLIC) <= set(declaring)


def test_every_exception_of_simrun_has_the_one_base() -> None:
    """Every exception class simrun defines derives from `simrun.SimrunError`, so a caller
    can catch all of simrun's errors at once; warnings and framework exceptions (HTTP, click)
    keep their own bases."""
    foreign = ("Warning", "HTTPException", "ClickException")
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "examples" in path.parts or path.name == "__main__.py":
            continue
        module = importlib.import_module(_module_name(path))
        for name, value in vars(module).items():
            if not (isinstance(value, type) and issubclass(value, BaseException)):
                continue
            if value.__module__ != module.__name__:
                continue
            if any(base.__name__.endswith(foreign) for base in value.__mro__):
                continue
            if not issubclass(value, simrun.SimrunError):
                outside.append(f"{module.__name__}.{name}")
    assert outside == []
