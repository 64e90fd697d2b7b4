"""Imports point one way: a package imports only packages of lower layers (and itself).

The layers, lowest first (ARCHITECTURE.md draws them):

0. ``simrun.errors`` — `SimrunError`, the base of simrun's exceptions;
1. ``simrun.plugins`` — the spec of a task type;
2. ``simrun.core`` (the neutral core) beside ``graph``, ``config``, ``db``, the example
   plugin package and the curated top package ``simrun`` — none of them imports another;
3. ``workflow`` — the workflow document;
4. ``resources``, ``runstore``, ``queues`` and ``client`` — storage and transport;
5. ``app`` — what the command line, the Python API and the Editor share: preparing a
   workflow, its plans, following a run;
6. ``service`` and ``worker`` — the two sides, which never import each other;
7. ``local`` — embedded mode, which starts both;
8. ``cli`` — the command line, at the edge;
9. ``api`` — the Python API, for scripts and notebooks.

The top package ``simrun`` exports the API lazily (PEP 562): that one import, up from
layer 2, is allowed by name (`LAZY_EXPORTS`), and importing ``simrun`` imports none of it.

The check reads the source (every ``import``, also those inside functions) without
importing anything, so it sees lazy imports too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Set
from pathlib import Path

import pytest

SIMRUN = Path(__file__).resolve().parents[2] / "simrun"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"simrun.errors"}),
    frozenset({"simrun.plugins"}),
    frozenset(
        {"simrun", "simrun.core", "simrun.graph", "simrun.config", "simrun.db", "simrun.examples"}
    ),
    frozenset({"simrun.workflow"}),
    frozenset({"simrun.resources", "simrun.runstore", "simrun.queues", "simrun.client"}),
    frozenset({"simrun.app"}),
    frozenset({"simrun.service", "simrun.worker"}),
    frozenset({"simrun.local"}),
    frozenset({"simrun.cli"}),
    frozenset({"simrun.api"}),
)

#: Imports against the layers allowed by name, each with its reason.
LAZY_EXPORTS: Mapping[tuple[str, str], str] = {
    ("simrun", "simrun.api"): "simrun.submit & co., imported when first asked for (PEP 562)",
}


def unit_of(module: str) -> str:
    """The unit a module belongs to: the longest name of `LAYERS` that it is or is under."""
    best = ""
    for layer in LAYERS:
        for name in layer:
            inside = module == name or (name != "simrun" and module.startswith(name + "."))
            if inside and len(name) > len(best):
                best = name
    if not best:
        raise ValueError(f"module {module} belongs to no layer: add it to LAYERS")
    return best


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """The imports of ``graph`` (module → simrun modules it imports) that go against the
    layers: to a higher layer, or across to another unit of the same layer."""
    found = []
    for module, imported in sorted(graph.items()):
        mine = unit_of(module)
        for target in sorted(set(imported)):
            theirs = unit_of(target)
            if theirs == mine or (module, target) in LAZY_EXPORTS:
                continue
            if layer_of(theirs) < layer_of(mine):
                continue
            where = "the same layer" if layer_of(theirs) == layer_of(mine) else "a higher layer"
            found.append(f"{module} imports {target} ({theirs} is in {where} than {mine})")
    return found


def source_graph(root: Path) -> dict[str, set[str]]:
    """Module → the simrun modules its source imports, for every module under ``root``."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            targets.update(n for n in names if n == "simrun" or n.startswith("simrun."))
        graph[module] = targets
    return graph


def test_the_source_tree_imports_downwards_only() -> None:
    """Every import in simrun/ goes to its own unit or to a lower layer."""
    problems = violations(source_graph(SIMRUN))
    assert not problems, "\n".join(problems)


def test_the_core_imports_nothing_of_simrun_but_plugins() -> None:
    """The neutral core is neutral: its modules import only `simrun.plugins`, `simrun.errors`
    and each other."""
    graph = source_graph(SIMRUN)
    core = {m: t for m, t in graph.items() if m == "simrun.core" or m.startswith("simrun.core.")}
    assert core, "simrun.core has no modules"
    for module, targets in core.items():
        allowed = ("simrun.core", "simrun.plugins", "simrun.errors")
        outside = {t for t in targets if unit_of(t) not in allowed}
        assert not outside, f"{module} imports {sorted(outside)}"


@pytest.mark.parametrize(
    ("module", "target", "expected"),
    [
        ("simrun.worker.jobs", "simrun.service.controller", "the same layer"),
        ("simrun.queues.client", "simrun.worker.heartbeat", "a higher layer"),
        ("simrun.core.jobs", "simrun.queues.keys", "a higher layer"),
        ("simrun.runstore.rows", "simrun.resources", "the same layer"),
        ("simrun.service.controller", "simrun.cli.common", "a higher layer"),
        ("simrun.local.session", "simrun.cli.progress", "a higher layer"),
        ("simrun.app.plans", "simrun.service.controller", "a higher layer"),
        ("simrun.app.follow", "simrun.local.session", "a higher layer"),
        ("simrun.worker.__main__", "simrun.cli.worker", "a higher layer"),
    ],
)
def test_an_import_against_the_layers_is_reported(module: str, target: str, expected: str) -> None:
    """The check fails when, say, a worker module imports the service."""
    problems = violations({module: {target}})
    assert len(problems) == 1
    assert f"{module} imports {target}" in problems[0]
    assert expected in problems[0]


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("simrun.service.controller", "simrun.core.states"),
        ("simrun.worker.jobs", "simrun.queues.keys"),
        ("simrun.cli.run", "simrun.local.session"),
        ("simrun.cli.run", "simrun.service.routes"),
        ("simrun.service.routes.editor", "simrun.app.prepare"),
        ("simrun.api.runs", "simrun.app.follow"),
        ("simrun.core.jobs", "simrun.plugins"),
        ("simrun.service.controller", "simrun.service.dispatch"),
    ],
)
def test_an_import_downwards_or_within_a_unit_is_allowed(module: str, target: str) -> None:
    """Imports to a lower layer or within a package pass."""
    assert violations({module: {target}}) == []


def test_only_the_top_package_may_import_the_api_from_below() -> None:
    """The lazy export of the Python API by ``simrun`` is the one import up allowed: any
    other module of a lower layer importing ``simrun.api`` is reported."""
    assert violations({"simrun": {"simrun.api"}}) == []
    problems = violations({"simrun.client": {"simrun.api"}})
    assert len(problems) == 1
    assert "a higher layer" in problems[0]


def test_a_module_outside_every_layer_is_refused() -> None:
    """A new top-level module must be given a layer before it can be imported anywhere."""
    with pytest.raises(ValueError, match="belongs to no layer"):
        violations({"simrun.newthing": {"simrun.core"}})


#: What the command line may import of the service and the worker, each with its reason:
#: the entry points it starts (``simrun service``, ``simrun worker``) and no internals. Any
#: other import of simrun.service or simrun.worker by a module of simrun.cli fails.
CLI_REACH: Mapping[tuple[str, str], str] = {
    ("simrun.cli.service", "simrun.service.main"): "simrun service runs serve()",
    ("simrun.cli.service", "simrun.service.settings"): "simrun service builds its settings",
    ("simrun.cli.worker", "simrun.worker.container"): "simrun worker runs a container",
    ("simrun.cli.worker", "simrun.worker.settings"): "simrun worker builds its settings",
    ("simrun.cli.worker", "simrun.worker.pool.processes"): "PoolError: the pool did not start",
}


def cli_reach(graph: Mapping[str, Iterable[str]], allowed: Set[tuple[str, str]]) -> list[str]:
    """The imports of simrun.service or simrun.worker modules by simrun.cli modules that
    ``allowed`` does not list."""
    found = []
    for module, imported in sorted(graph.items()):
        if unit_of(module) != "simrun.cli":
            continue
        for target in sorted(set(imported)):
            inside = unit_of(target) in ("simrun.service", "simrun.worker")
            if inside and (module, target) not in allowed:
                found.append(f"{module} imports {target}")
    return found


def test_the_command_line_imports_only_the_entry_points_of_service_and_worker() -> None:
    """The command line reaches the service and the worker only through the entry points
    `CLI_REACH` lists; everything else comes from the lower layers."""
    problems = cli_reach(source_graph(SIMRUN), set(CLI_REACH))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("simrun.cli.progress", "simrun.service.controller"),
        ("simrun.cli.remote", "simrun.service.submit"),
        ("simrun.cli.worker", "simrun.worker.jobs"),
        ("simrun.cli.service", "simrun.service.controller"),
    ],
)
def test_a_command_line_import_of_service_internals_is_reported(module: str, target: str) -> None:
    """The check fails when the command line imports a service or worker module beyond its
    entry points."""
    assert cli_reach({module: {target}}, set(CLI_REACH)) == [f"{module} imports {target}"]


def test_the_allowed_command_line_imports_pass() -> None:
    """Every import `CLI_REACH` names passes, and imports of the lower layers are not its
    business."""
    graph: dict[str, set[str]] = {}
    for module, target in CLI_REACH:
        graph.setdefault(module, set()).add(target)
    graph["simrun.cli.run"] = {"simrun.local.session", "simrun.core.views"}
    assert cli_reach(graph, set(CLI_REACH)) == []
