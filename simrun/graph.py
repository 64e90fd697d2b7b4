"""Pure functions over the task graph of a workflow (each task to the tasks it reads
from): order, cycles, what reads a task."""

from __future__ import annotations

import graphlib
from collections.abc import Collection, Mapping

from simrun.errors import SimrunError

Graph = Mapping[str, Collection[str]]


class CycleError(SimrunError, ValueError):
    """The graph has a cycle; ``cycle`` lists it with its first task repeated at the end."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__("cycle: " + " -> ".join(cycle))


def _sorter(deps: Graph) -> graphlib.TopologicalSorter[str]:
    """A sorter over ``deps`` without names that are not tasks, built in sorted order."""
    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for name in sorted(deps):
        sorter.add(name, *sorted(d for d in deps[name] if d in deps))
    return sorter


def _prepared(deps: Graph) -> graphlib.TopologicalSorter[str]:
    """The sorter of ``deps``, prepared; `CycleError` naming a cycle (reversed from
    graphlib's, starting at its first name in sorted order)."""
    sorter = _sorter(deps)
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        ring = list(reversed(exc.args[1]))[:-1]
        start = ring.index(min(ring))
        ring = ring[start:] + ring[:start]
        raise CycleError([*ring, ring[0]]) from None
    return sorter


def find_cycle(deps: Graph) -> list[str] | None:
    """One cycle of ``deps`` as ``[a, b, ..., a]`` (a reads from b, ...), or None;
    deterministic, names that are not keys ignored."""
    try:
        _prepared(deps)
    except CycleError as exc:
        return exc.cycle
    return None


def topological_order(deps: Graph) -> list[str]:
    """Every task after all the tasks it reads from, ties broken by name; `CycleError`
    when there is no such order."""
    sorter = _prepared(deps)
    order: list[str] = []
    while sorter.is_active():
        wave = sorted(sorter.get_ready())
        order.extend(wave)
        sorter.done(*wave)
    return order


def downstream(deps: Graph, task: str) -> set[str]:
    """The tasks that read ``task``'s outputs, directly or through others (not ``task``)."""
    readers: dict[str, set[str]] = {}
    for name, ups in deps.items():
        for up in ups:
            readers.setdefault(up, set()).add(name)
    found: set[str] = set()
    stack = [task]
    while stack:
        for reader in readers.get(stack.pop(), ()):
            if reader not in found:
                found.add(reader)
                stack.append(reader)
    found.discard(task)
    return found
