"""Graph functions: topological order, cycles and readiness, as properties and tables."""

from __future__ import annotations

import itertools
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.graph import CycleError, downstream, find_cycle, topological_order


@st.composite
def dags(draw: st.DrawFn) -> dict[str, set[str]]:
    """A random DAG: node i may only depend on nodes < i, then names are shuffled."""
    n = draw(st.integers(min_value=0, max_value=25))
    names = draw(st.permutations([f"t{i}" for i in range(n)]))
    deps: dict[str, set[str]] = {}
    for i, name in enumerate(names):
        earlier = names[:i]
        deps[name] = set(draw(st.lists(st.sampled_from(earlier), max_size=4))) if earlier else set()
    return deps


@st.composite
def graphs_with_a_cycle(draw: st.DrawFn) -> dict[str, set[str]]:
    """A random DAG with a ring of edges added through 1 to 5 of its nodes."""
    deps = draw(dags())
    if not deps:
        deps = {"solo": set()}
    names = sorted(deps)
    ring = draw(st.lists(st.sampled_from(names), min_size=1, max_size=5, unique=True))
    for a, b in zip(ring, [*ring[1:], ring[0]], strict=True):
        deps[a].add(b)
    return deps


@given(dags())
def test_topological_order_respects_every_edge(deps: dict[str, set[str]]) -> None:
    """Every task comes after every task it reads from, and each task appears once."""
    order = topological_order(deps)
    assert sorted(order) == sorted(deps)
    position = {name: i for i, name in enumerate(order)}
    for name, ds in deps.items():
        for d in ds:
            assert position[d] < position[name]


@given(dags())
def test_a_dag_has_no_cycle(deps: dict[str, set[str]]) -> None:
    """find_cycle finds nothing in a DAG."""
    assert find_cycle(deps) is None


@given(graphs_with_a_cycle())
def test_a_cycle_is_always_reported(deps: dict[str, set[str]]) -> None:
    """A graph with a cycle is refused, and the cycle reported is a real closed path."""
    cycle = find_cycle(deps)
    assert cycle is not None
    assert cycle[0] == cycle[-1]
    for a, b in itertools.pairwise(cycle):
        assert b in deps[a]
    with pytest.raises(CycleError) as info:
        topological_order(deps)
    assert info.value.cycle == cycle


def test_self_loop_is_a_cycle() -> None:
    """A task reading from itself is a cycle of one."""
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


@given(graphs_with_a_cycle(), st.randoms())
def test_the_cycle_reported_does_not_depend_on_the_order_of_tasks(
    deps: dict[str, set[str]], random: Random
) -> None:
    """The same graph names the same cycle whatever the order of its tasks, starting at
    the first of its tasks by name."""
    names = list(deps)
    random.shuffle(names)
    cycle = find_cycle(deps)
    assert cycle is not None
    assert find_cycle({n: deps[n] for n in names}) == cycle
    assert cycle[0] == min(cycle)


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("a", {"b", "c", "d"}),
        ("b", {"d"}),
        ("d", set()),
        ("e", set()),
        ("unknown", set()),
    ],
)
def test_downstream_is_every_task_reading_a_task_directly_or_not(
    task: str, expected: set[str]
) -> None:
    """The readers of a task, their readers and so on; never the task itself."""
    deps = {"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c"}, "e": set()}
    assert downstream(deps, task) == expected


@given(dags())
def test_downstream_agrees_with_the_order(deps: dict[str, set[str]]) -> None:
    """Every task downstream of t comes after t in the topological order."""
    order = topological_order(deps)
    for task in deps:
        for reader in downstream(deps, task):
            assert order.index(reader) > order.index(task)
