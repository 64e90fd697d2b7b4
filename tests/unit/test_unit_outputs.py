"""What a task type declares of its units' outputs for reuse per unit
(`simrun.plugins.UnitOutputs` on its settings model): the loader's checks, each problem a
sentence naming the model and the field. Pure: no plugin is imported."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from simrun.plugins import TaskType, UnitOutputs, task_type_problems, unit_outputs


def declaring(declared: Any, splittable: bool = True) -> TaskType:
    """A type whose settings model holds ``declared`` as ``simrun_unit_outputs``."""

    class Settings(BaseModel):
        simrun_unit_outputs: ClassVar[Any] = declared
        units: int = 4
        seed: int = 1

    if splittable:
        return TaskType("t", Settings, count_units="m:count", compute_unit="m:unit")
    return TaskType("t", Settings, command="prog {settings}")


def test_a_declared_type_is_reused_per_unit() -> None:
    """A good declaration passes the checks and is what `unit_outputs` gives; its paths
    are formatted with the index."""
    good = UnitOutputs(
        files=("part-{index:03d}.npy", "logs/{index}.txt"), count_settings=("units",)
    )
    task_type = declaring(good)
    assert task_type_problems(task_type) == []
    assert unit_outputs(task_type) == good
    assert good.paths(7) == ["part-007.npy", "logs/7.txt"]


def test_a_type_that_declares_nothing_is_not_reused_per_unit() -> None:
    """No declaration: no problem, and no unit outputs."""

    class Plain(BaseModel):
        units: int = 4

    task_type = TaskType("t", Plain, count_units="m:count", compute_unit="m:unit")
    assert task_type_problems(task_type) == []
    assert unit_outputs(task_type) is None


@pytest.mark.parametrize(
    ("declared", "splittable", "says"),
    [
        ({"files": ["x"]}, True, "is a dict, not a simrun.plugins.UnitOutputs"),
        (UnitOutputs(("p-{index}",)), False, "only a splittable type"),
        (UnitOutputs(()), True, "files must be a non-empty tuple"),
        (UnitOutputs(("same.npy",)), True, "must use {index} and no other placeholder"),
        (UnitOutputs(("p-{index}-{seed}",)), True, "cannot be formatted with an index"),
        (UnitOutputs(("p-{index:q}",)), True, "cannot be formatted with an index"),
        (UnitOutputs(("p-{index!r:.0}",)), True, "names the same file for every index"),
        (UnitOutputs(("/abs/{index}",)), True, "relative path inside the out directory"),
        (UnitOutputs(("../{index}",)), True, "relative path inside the out directory"),
        (UnitOutputs(("p-{index}",), ("unit",)), True, "'unit' is not a field of the model"),
    ],
)
def test_a_bad_declaration_is_refused_at_load(declared: Any, splittable: bool, says: str) -> None:
    """Each mistake of a declaration is one sentence naming the settings model's
    ``simrun_unit_outputs``; the type is then not loaded."""
    problems = task_type_problems(declaring(declared, splittable))
    assert len(problems) == 1, problems
    assert "settings Settings.simrun_unit_outputs" in problems[0]
    assert says in problems[0]


def test_simrun_types_tells_a_type_reused_per_unit() -> None:
    """`simrun types` prints the declaration as a trait, and `--json` carries it (None for
    a type without one)."""
    from simrun.cli.group import type_lines
    from simrun.core.views import type_info

    task_type = declaring(UnitOutputs(("part-{index}.npy",), ("units",)))
    assert "units reused one by one (part-{index}.npy; count settings: units)" in "\n".join(
        type_lines(task_type)
    )
    assert type_info(task_type)["unit_outputs"] == {
        "files": ("part-{index}.npy",),
        "count_settings": ("units",),
    }
    assert type_info(declaring(None))["unit_outputs"] is None
