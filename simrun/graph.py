"""Pure functions over the task graph of a workflow: order, cycles, readiness.

The graph is a mapping from each task to the set of tasks it reads from. Nothing here
does I/O; the controller and the validator call these with plain data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

__all__ = ["CycleError", "find_cycle", "ready_tasks", "topological_order"]

Graph = Mapping[str, Collection[str]]


class CycleError(ValueError):
    """The graph has a cycle; ``cycle`` lists it with its first task repeated at the end."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__("cycle: " + " -> ".join(cycle))


def find_cycle(deps: Graph) -> list[str] | None:
    """One cycle of ``deps`` as ``[a, b, ..., a]`` (a reads from b, ...), or None.

    Dependencies on names that are not keys of ``deps`` are ignored (they are reported
    elsewhere as unknown tasks). Deterministic: tasks are visited in sorted order.
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(deps, white)
    for root in sorted(deps):
        if colour[root] != white:
            continue
        # Iterative DFS; the stack holds (node, iterator over its sorted dependencies).
        path: list[str] = [root]
        colour[root] = grey
        stack = [iter(sorted(d for d in deps[root] if d in colour))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
                continue
            if colour[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(sorted(d for d in deps[nxt] if d in colour)))
    return None


def topological_order(deps: Graph) -> list[str]:
    """Every task after all the tasks it reads from; ties broken by name.

    Raises `CycleError` naming a cycle when there is no such order.
    """
    cycle = find_cycle(deps)
    if cycle is not None:
        raise CycleError(cycle)
    order: list[str] = []
    placed: set[str] = set()
    pending = {name: {d for d in ds if d in deps} for name, ds in deps.items()}
    while pending:
        wave = sorted(name for name, ds in pending.items() if ds <= placed)
        order.extend(wave)
        placed.update(wave)
        for name in wave:
            del pending[name]
    return order


def ready_tasks(deps: Graph, done: Iterable[str], started: Iterable[str] = ()) -> list[str]:
    """Tasks that may start now: not done, not started, every dependency done. Sorted."""
    done_set = set(done)
    skip = done_set | set(started)
    return sorted(
        name for name, ds in deps.items() if name not in skip and all(d in done_set for d in ds)
    )
