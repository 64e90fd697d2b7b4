"""A task type whose ``count_units`` answers what its settings ask, right or wrong, for the
tests of how the service starts a task (`simrun.service.advance`): ``svc-odd-count``.

``answer``: ``"units"`` (the ``units`` setting), ``"raise"``, ``"text"``, ``"float"``,
``"bool"``, ``"negative"``, or ``"hang"`` (sleeps ``hang_s``, far longer than a test).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType


class OddSettings(BaseModel):
    answer: str = "units"
    units: int = 2
    hang_s: float = 3600.0


def count_units(settings: OddSettings) -> Any:
    answers: dict[str, Any] = {"text": "12", "float": 2.5, "bool": True, "negative": -3}
    if settings.answer == "units":
        return settings.units
    if settings.answer == "raise":
        raise RuntimeError("the model file is unreadable")
    if settings.answer == "hang":
        time.sleep(settings.hang_s)
        return 1
    return answers[settings.answer]


def compute_unit(settings: OddSettings, index: int, paths: TaskPaths) -> None:
    """Nothing (no worker runs in these tests)."""


ODD = TaskType(
    name="svc-odd-count",
    settings=OddSettings,
    hint=ResourceHint(memory_base_gb=0.25, memory_per_worker_gb=0.25),
    count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:compute_unit",
    description="count_units that answers what its settings ask, for the service's tests",
)
