"""``--set TASK.SETTING=VALUE``: parsing one, and applying them to a workflow document."""

from __future__ import annotations

from typing import Any

import pytest

from simrun.workflow import (
    WorkflowError,
    apply_overrides,
    parse_override,
    parse_workflow,
)

DOC = parse_workflow(
    "tasks:\n"
    "  - name: sweep\n"
    "    type: heat\n"
    "    settings: {points: 24, solver: {tol: 0.1}}\n"
    "  - name: summary\n"
    "    type: report\n"
)


@pytest.mark.parametrize(
    ("given", "task", "path", "value"),
    [
        ("sweep.points=200", "sweep", ("points",), 200),
        # as in the file (YAML 1.1): a string, which a float setting's model reads as 0.001
        ("sweep.rate=1e-3", "sweep", ("rate",), "1e-3"),
        ("sweep.rate=1.0e-3", "sweep", ("rate",), 1e-3),
        ("sweep.rate=0.5", "sweep", ("rate",), 0.5),
        ("sweep.on=true", "sweep", ("on",), True),
        ('sweep.points="200"', "sweep", ("points",), "200"),
        ("sweep.title=a = b", "sweep", ("title",), "a = b"),
        ("sweep.xs=[1, 2]", "sweep", ("xs",), [1, 2]),
        ("sweep.name=", "sweep", ("name",), ""),
        ("sweep.opt=null", "sweep", ("opt",), None),
        ("sweep.solver.tol=0.5", "sweep", ("solver", "tol"), 0.5),
    ],
)
def test_a_value_is_read_by_yaml_scalar_rules(
    given: str, task: str, path: tuple[str, ...], value: Any
) -> None:
    """The text after the first '=' is read as the file's values are (YAML): numbers,
    booleans, null, quoted strings and flow lists keep their types; the part before names
    the task and the setting."""
    o = parse_override(given)
    assert (o.task, o.path, o.value, o.given) == (task, path, value, given)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sweep", "expected TASK.SETTING=VALUE"),
        ("sweep=3", "expected TASK.SETTING=VALUE"),
        (".points=3", "expected TASK.SETTING=VALUE"),
        ("sweep.=3", "expected TASK.SETTING=VALUE"),
        ("sweep.xs=[1, 2", "the value is not valid YAML"),
    ],
)
def test_a_malformed_set_is_refused_saying_the_form(given: str, expected: str) -> None:
    """A --set without TASK.SETTING=VALUE, or with a value YAML cannot read, is one error
    quoting the option."""
    with pytest.raises(ValueError, match=expected) as info:
        parse_override(given)
    assert repr(given) in str(info.value)


def test_overrides_replace_add_and_nest_settings_in_order() -> None:
    """Overrides set a setting over the file's, add a new one, reach into a mapping, and a
    later one for the same setting wins; the other task is untouched."""
    sets = [
        parse_override(g)
        for g in ("sweep.points=100", "sweep.grid=32", "sweep.solver.tol=0.5", "sweep.points=7")
    ]
    doc = apply_overrides(DOC, sets, "wf.yaml")
    assert doc.task("sweep").settings == {"points": 7, "grid": 32, "solver": {"tol": 0.5}}
    assert doc.task("summary").settings == {}
    assert DOC.task("sweep").settings["points"] == 24  # the document read is not changed


def test_an_unknown_task_is_refused_with_a_suggestion() -> None:
    """A --set for a task the workflow does not have names the option and the closest task."""
    with pytest.raises(WorkflowError) as info:
        apply_overrides(DOC, [parse_override("swep.points=3")], "wf.yaml")
    (problem,) = info.value.problems
    assert str(problem) == "--set swep.points=3: no task 'swep' (did you mean 'sweep'?)"


def test_a_key_below_a_setting_that_is_no_mapping_is_refused() -> None:
    """--set sweep.points.x=1 cannot reach into the number 24."""
    with pytest.raises(WorkflowError, match="setting 'points' is not a mapping"):
        apply_overrides(DOC, [parse_override("sweep.points.x=1")], "wf.yaml")
