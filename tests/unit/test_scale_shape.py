"""Which container shape `simrun scale` assumes for a queue without live workers."""

from __future__ import annotations

import pytest

from simrun.cli.scale import ScaleError, assumed_shape, backlog_of
from simrun.core.scaling import ContainerShape

SERVICE = ContainerShape(memory_gb=6.0, processes=3)


@pytest.mark.parametrize(
    ("memory_gb", "processes", "service", "expected"),
    [
        (None, None, SERVICE, (SERVICE, "service default")),
        (16.0, None, SERVICE, (ContainerShape(16.0, 3), "given")),
        (None, 8, SERVICE, (ContainerShape(6.0, 8), "given")),
        (2.0, 1, SERVICE, (ContainerShape(2.0, 1), "given")),
    ],
)
def test_flags_win_then_the_service_default_then_the_fallback(
    memory_gb: float | None,
    processes: int | None,
    service: ContainerShape,
    expected: tuple[ContainerShape, str],
) -> None:
    """Each flag given wins field by field; without flags the service's default shape is
    used."""
    assert assumed_shape(memory_gb, processes, service) == expected


def test_the_service_default_is_read_from_the_backlog_answer() -> None:
    """The backlog answer's default_shape is read; an answer without it, or a malformed
    one, is a ScaleError."""
    answer = backlog_of({"queues": [], "default_shape": {"memory_gb": 6, "processes": 3}})
    assert answer.default_shape == SERVICE
    for shape in ({"memory_gb": "x", "processes": 3}, {"memory_gb": 0, "processes": 3}, None):
        with pytest.raises(ScaleError, match="backlog answer"):
            backlog_of({"queues": [], "default_shape": shape})
    with pytest.raises(ScaleError, match="backlog answer"):
        backlog_of({"queues": []})
