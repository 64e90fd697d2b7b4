"""The workflow document: parsing, and every refusal naming the task, field and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from simrun.core.layout import name_problem
from simrun.plugins import ResourceHint, TaskType, load_task_types
from simrun.workflow import (
    Problem,
    ResourceOverride,
    Workflow,
    WorkflowError,
    check_workflow,
    load_workflow,
    parse_workflow,
    source_problems,
    validate_workflow,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class SweepSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grid: int = Field(32, ge=8)
    points: int = 4


class ReportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = "report"


TYPES = {
    "sweep": TaskType(
        "sweep",
        SweepSettings,
        inputs=("plate",),
        count_units="m:c",
        compute_unit="m:u",
        hint=ResourceHint(0.5, 1.0),
        cost_setting="grid",
    ),
    "report": TaskType("report", ReportSettings, inputs=("table",), command="r {out} {input}"),
    "mesh": TaskType("mesh", ReportSettings, outputs=("out", "mesh"), command="m {out}"),
}

GOOD = """\
sources:
  plate: plate.json
tasks:
  - name: hot
    type: sweep
    settings: {grid: 64}
    inputs: {plate: "source:plate"}
  - name: summary
    type: report
    inputs: {table: hot.out}
"""


def problems_of(text: str) -> list[Problem]:
    """Every problem of a document: parse errors or validation problems, with lines."""
    try:
        doc = parse_workflow(text, "wf.yaml")
        check_workflow(doc, TYPES, "wf.yaml", text)
    except WorkflowError as exc:
        return exc.problems
    return []


def only_problem(text: str) -> Problem:
    found = problems_of(text)
    assert len(found) == 1, found
    return found[0]


def test_a_good_document_validates_with_defaults_filled_in() -> None:
    """A sound document checks clean and each task's settings come back with defaults."""
    doc = parse_workflow(GOOD)
    settings = check_workflow(doc, TYPES)
    assert settings == {"hot": {"grid": 64, "points": 4}, "summary": {"title": "report"}}
    assert doc.model == "plate"
    assert doc.order() == ["hot", "summary"]


def test_json_documents_are_accepted() -> None:
    """A JSON document is read like YAML."""
    doc = parse_workflow('{"tasks": [{"name": "m", "type": "mesh"}]}')
    assert check_workflow(doc, TYPES) == {"m": {"title": "report"}}
    assert doc.model == ""


def test_the_example_workflow_validates() -> None:
    """examples/heat.yaml validates against the installed task types, sources included."""
    path = EXAMPLES / "heat.yaml"
    doc = load_workflow(path)
    check_workflow(doc, load_task_types(), str(path), path.read_text())
    assert source_problems(doc, path.parent) == []


def test_unknown_type_suggests_the_closest_names() -> None:
    """An unknown task type is named with the task, the line, and the closest known types."""
    problem = only_problem(GOOD.replace("type: sweep", "type: swep"))
    assert problem.task == "hot"
    assert problem.line == 5
    assert "unknown task type 'swep'; did you mean 'sweep'?" in problem.message
    assert str(problem).startswith("line 5: task 'hot', type:")


def test_settings_rejected_by_the_model_name_the_field() -> None:
    """Settings the type's model rejects are reported per field, with the line of the field."""
    text = GOOD.replace("settings: {grid: 64}", "settings:\n      grid: 2\n      colour: red")
    found = problems_of(text)
    by_where = {p.where(): p for p in found}
    assert set(by_where) == {"task 'hot', settings.grid", "task 'hot', settings.colour"}
    assert "greater than or equal to 8" in by_where["task 'hot', settings.grid"].message
    assert by_where["task 'hot', settings.grid"].line == 7
    assert "unknown setting 'colour'" in by_where["task 'hot', settings.colour"].message


def test_unknown_and_unconnected_ports() -> None:
    """An input the type does not have, and a port of the type left unconnected, both fail."""
    text = GOOD.replace('inputs: {plate: "source:plate"}', 'inputs: {plat: "source:plate"}')
    messages = [p.message for p in problems_of(text)]
    assert any("has no input port 'plat' (its ports: plate)" in m for m in messages)
    assert any("input port 'plate' of type 'sweep' is not connected" in m for m in messages)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("hott.out", "unknown task 'hott'; did you mean 'hot'?"),
        ("hot.mesh", "task 'hot' (type 'sweep') has no output port 'mesh' (its ports: out)"),
        ("source:plates", "unknown source 'plates'; did you mean 'plate'?"),
        ("summary.out", "task 'summary' reads its own output"),
        ("hot", "is neither 'task.port' nor 'source:name'"),
    ],
)
def test_bad_references_name_the_task_and_port(ref: str, expected: str) -> None:
    """A reference to an unknown task, port or source is named where it is written."""
    problem = only_problem(GOOD.replace("table: hot.out", f"table: {ref!r}"))
    assert problem.task == "summary"
    assert problem.where() == "task 'summary', inputs.table"
    assert problem.line == 10
    assert expected in problem.message


def test_stage_names_connected_input_ports() -> None:
    """A task may stage its connected input ports; the parsed task keeps them."""
    text = GOOD.replace(
        '    inputs: {plate: "source:plate"}',
        '    inputs: {plate: "source:plate"}\n    stage: [plate]',
    )
    assert problems_of(text) == []
    assert parse_workflow(text, "wf.yaml").task("hot").stage == ["plate"]


@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        ("[plat]", "stage names 'plat', which is not a connected input port of the task "
         "(its inputs: plate)"),
        ("[plate, plate]", "names a port twice"),
        ("['not a port']", "'not a port' is not an input port name"),
    ],
)  # fmt: skip
def test_bad_stage_is_named(stage: str, expected: str) -> None:
    """Staging a port the task does not connect, a port twice, or a name that is no port is
    an error naming the task and the field."""
    text = GOOD.replace(
        '    inputs: {plate: "source:plate"}',
        f'    inputs: {{plate: "source:plate"}}\n    stage: {stage}',
    )
    problem = only_problem(text)
    assert problem.task == "hot"
    assert "stage" in problem.where()
    assert expected in problem.message


def test_duplicate_task_names() -> None:
    """Two tasks with one name are refused."""
    text = GOOD + "  - name: hot\n    type: mesh\n"
    assert "task name 'hot' is used twice" in only_problem(text).message


def test_duplicate_keys_are_refused_with_their_line() -> None:
    """A key given twice in one mapping is refused (YAML would silently keep the last)."""
    text = GOOD.replace("settings: {grid: 64}", "settings: {grid: 64}\n    settings: {grid: 8}")
    problem = only_problem(text)
    assert problem.message == "key given twice"
    assert problem.line == 7


def test_a_cycle_is_printed() -> None:
    """Tasks that read from each other in a loop are refused, with the loop spelled out."""
    text = textwrap.dedent(
        """\
        tasks:
          - {name: a, type: report, inputs: {table: b.out}}
          - {name: b, type: report, inputs: {table: c.out}}
          - {name: c, type: report, inputs: {table: a.out}}
        """
    )
    assert only_problem(text).message == "the tasks form a cycle: a -> b -> c -> a"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a/b", "path separator"),
        ("..", "contains '..'"),
        ("x..y", "contains '..'"),
        ("", "is empty"),
        ("tab\there", "control character"),
        (" pad", "leading or trailing spaces"),
        ("-rf", "starts with '-'"),
        ("x" * 101, "longer than 100"),
    ],
)
def test_unsafe_names_are_refused(name: str, expected: str) -> None:
    """Task and source names that are unsafe as directory names are refused."""
    why = name_problem(name)
    assert why is not None
    assert expected in why
    doc = Workflow(sources={name: "f"}, tasks=[{"name": name, "type": "mesh"}])  # type: ignore[list-item]  # pydantic coerces the dict
    messages = [p.message for p in validate_workflow(doc, TYPES)]
    assert any(m.startswith("task name") and expected in m for m in messages)
    assert any(m.startswith("source name") and expected in m for m in messages)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("{memory_per_worker_gb: -1}", "memory_per_worker_gb must be a finite number >= 0"),
        ("{memory_per_worker_gb: 0}", "memory_per_worker_gb must be more than 0"),
        ("{memory_base_gb: 1e9}", "is absurd"),
        ("{gpus: 1000}", "gpus must be between 0 and 64"),
        ("{scratch_gb: .nan}", "scratch_gb must be a finite number"),
        ("{memory_gb: 4}", "unknown field"),
    ],
)
def test_bad_resource_overrides(override: str, expected: str) -> None:
    """Negative, absurd or unknown resource overrides are refused, naming the task and field."""
    text = GOOD.replace(
        "    settings: {grid: 64}", f"    settings: {{grid: 64}}\n    resources: {override}"
    )
    problem = only_problem(text)
    assert expected in problem.message
    assert problem.task == "hot"
    assert problem.line == 7


def test_a_good_override_parses() -> None:
    """A sensible override keeps its values and leaves the rest unset."""
    text = GOOD.replace(
        "    settings: {grid: 64}",
        "    settings: {grid: 64}\n    resources: {memory_per_worker_gb: 3, gpus: 1}",
    )
    doc = parse_workflow(text)
    assert doc.tasks[0].resources == ResourceOverride(memory_per_worker_gb=3.0, gpus=1)


def test_all_problems_are_reported_together() -> None:
    """A document with several problems reports all of them at once, not just the first."""
    text = GOOD.replace("type: sweep", "type: nope").replace("table: hot.out", "table: gone.out")
    text += "  - name: a/b\n    type: mesh\n"
    found = problems_of(text)
    assert len(found) == 3
    error = WorkflowError(found, "wf.yaml")
    assert str(error).startswith("wf.yaml: 3 problems:")
    assert [d["task"] for d in error.as_dicts()] == ["a/b", "hot", "summary"]


@pytest.mark.parametrize(
    ("text", "expected", "line"),
    [
        ("tasks: [\n", "not valid YAML", 2),
        ("", "the document is empty", 1),
        ("- a\n- b\n", "the document is a list", 1),
        ("sources: {}\n", "Field required", 1),
        ("tasks:\n  - name: x\n", "Field required", 2),
        ("tasks: []\nextra: 1\n", "unknown field", 2),
    ],
)
def test_malformed_documents(text: str, expected: str, line: int | None) -> None:
    """Documents that are not YAML, or not shaped like a workflow, get one clear error."""
    found = problems_of(text)
    assert found, text
    assert expected in found[0].message
    assert found[0].line == line


def test_empty_task_list() -> None:
    """A workflow without tasks is refused."""
    assert "at least one task" in only_problem("tasks: []\n").message


def test_unreadable_file() -> None:
    """A workflow path that cannot be read is reported with its path."""
    with pytest.raises(WorkflowError, match=r"no-such\.yaml"):
        load_workflow(Path("/no/such/dir/no-such.yaml"))


def test_a_task_name_with_a_dot_or_colon_is_refused_naming_the_task_and_field() -> None:
    """A task named ``heat.sweep`` (which ``heat.sweep.out`` and ``--set heat.sweep.grid=1``
    could not name) is refused at validation, as is one named ``source:x``."""
    text = textwrap.dedent(
        """\
        sources: {plate: plate.json}
        tasks:
          - {name: heat.sweep, type: sweep, inputs: {plate: "source:plate"}}
          - {name: "source:x", type: report, inputs: {table: heat.sweep.out}}
        """
    )
    problems = validate_workflow(parse_workflow(text), TYPES)
    named = {(p.task, p.loc): p.message for p in problems}
    dot = named[("heat.sweep", ("tasks", 0, "name"))]
    assert dot.startswith("task name 'heat.sweep' contains '.'")
    assert "task 'heat.sweep', name: task name" in str(problems[0])
    assert "contains ':'" in named[("source:x", ("tasks", 1, "name"))]
    assert "neither 'task.port'" in named[("source:x", ("tasks", 1, "inputs", "table"))]


class LenientSettings(BaseModel):
    precision: str = "low"
    points: int = 4


class OpenSettings(BaseModel):
    model_config = ConfigDict(extra="allow")
    precision: str = "low"


LENIENT_TYPES = {
    "lenient": TaskType("lenient", LenientSettings, command="l {settings} {out}"),
    "open": TaskType("open", OpenSettings, command="o {settings} {out}"),
}


def test_a_misspelled_setting_is_refused_with_a_suggestion_even_if_the_model_ignores_it() -> None:
    """A name the settings model does not know is refused with "did you mean" and its line,
    although pydantic's default (extra="ignore") would drop it and run with the default."""
    text = "tasks:\n  - name: mc\n    type: lenient\n    settings:\n      precison: high\n"
    with pytest.raises(WorkflowError) as info:
        check_workflow(parse_workflow(text), LENIENT_TYPES, text=text)
    (problem,) = info.value.problems
    assert problem.line == 5
    assert str(problem) == (
        "line 5: task 'mc', settings.precison: unknown setting 'precison' "
        "(did you mean 'precision'?)"
    )


def test_a_type_opts_out_of_the_unknown_setting_check_with_extra_allow() -> None:
    """A settings model with extra="allow" accepts names it does not declare."""
    text = "tasks:\n  - name: mc\n    type: open\n    settings:\n      anything: 1\n"
    settings = check_workflow(parse_workflow(text), LENIENT_TYPES, text=text)
    assert settings["mc"]["anything"] == 1


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("retries", "-1", "retries must be an integer between 0 and 100"),
        ("retries", "2.5", "valid integer"),
        ("retries", "true", "valid integer"),
        ("retry_on", "[]", "is empty"),
        ("retry_on", "[valueerror]", "'valueerror' is neither memory, timeout, error nor"),
        ("retry_delay_s", "-1", "retry_delay_s must be a finite number >= 0"),
        ("retry_delay_s", "99999", "retry_delay_s = 99999 is absurd"),
        ("timeout_s", "0", "timeout_s must be more than 0"),
        ("timeout_s", ".nan", "timeout_s must be a finite number >= 0"),
    ],
)
def test_retry_fields_of_a_task_are_checked_with_task_field_and_line(
    field: str, value: str, expected: str
) -> None:
    """A bad retries, retry_on, retry_delay_s or timeout_s names the task, the field and
    its line."""
    text = f"tasks:\n  - name: mc\n    type: lenient\n    {field}: {value}\n"
    with pytest.raises(WorkflowError) as info:
        parse_workflow(text)
    (problem,) = info.value.problems
    assert (problem.task, problem.loc[-1], problem.line) == ("mc", field, 4)
    assert expected in problem.message


def test_retry_fields_that_are_set_are_kept_with_the_task() -> None:
    """The retry fields given are what the task stores; none given, nothing."""
    text = (
        "tasks:\n  - name: mc\n    type: lenient\n    retries: 0\n"
        "    retry_on: [memory, ValueError]\n    timeout_s: 30\n"
        "  - name: plain\n    type: lenient\n"
    )
    doc = parse_workflow(text)
    assert doc.task("mc").retry_fields() == {
        "retries": 0,
        "retry_on": ["memory", "ValueError"],
        "timeout_s": 30.0,
    }
    assert doc.task("plain").retry_fields() is None
