"""The pure parts of the Python API: which input is a path and which is a document, the
result's helpers, the timeout's message, and the notebook display (with a stand-in for
IPython's ``display``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simrun.api.display import NotebookDisplay, in_notebook
from simrun.api.runs import RunResult, RunTimeout, result_of
from simrun.app.prepare import read_input
from simrun.core.views import FailureView, RunView, TaskView
from simrun.workflow import WorkflowError


def task(name: str, done: int, units: int, out: str | None = None) -> TaskView:
    return TaskView(
        name=name,
        type="heat",
        state="done" if done == units else "running",
        status="",
        queue="cpu",
        resources=None,
        units=units,
        counts={"done": done, "running": units - done},
        merge=None,
        seconds_per_unit=0.5,
        eta_s=None,
        out=out,
    )


def view(state: str = "running", *tasks: TaskView) -> RunView:
    return RunView(
        id="20261201-120000-abcdef",
        name="demo",
        state=state,
        message="",
        created_s=1.0,
        updated_s=2.0,
        finished_s=None,
        tasks=tasks,
    )


@pytest.mark.parametrize(
    ("given", "source"),
    [
        ("name: demo\ntasks: []\n", "workflow"),
        ('{"tasks": []}', "workflow"),
        ("tasks: []", "workflow"),
    ],
)
def test_a_string_with_a_document_is_the_document(given: str, source: str) -> None:
    """A string with a newline, a ``: `` or a leading ``{`` is the document itself, its
    problems reported under ``workflow``, its sources under the base given."""
    text, named, base = read_input(given, "/data")
    assert (text, named, base) == (given, source, Path("/data"))


def test_a_dict_is_written_as_yaml_in_its_order() -> None:
    """A dict becomes the YAML text of the document, its keys in their order."""
    text, named, _ = read_input({"name": "x", "tasks": []}, None)
    assert text == "name: x\ntasks: []\n"
    assert named == "workflow"


def test_a_dict_that_is_no_yaml_is_a_workflow_error() -> None:
    """A value YAML cannot write (an object) is refused as a problem of the workflow."""
    with pytest.raises(WorkflowError, match="the dict cannot be written as YAML"):
        read_input({"tasks": [object()]}, None)


def test_something_else_is_a_workflow_error() -> None:
    """A workflow that is neither a path, a string nor a dict is refused by its kind."""
    with pytest.raises(WorkflowError, match="not a int"):
        read_input(42, None)  # type: ignore[arg-type]  # what the check is for


def test_the_result_finds_tasks_outputs_and_failures() -> None:
    """`RunResult` is the run's view with its failures; `task` names the tasks there are
    when asked for another; `outputs` are the tasks' directories the view tells."""
    failure = FailureView(task="sweep", unit=3, error="Traceback\nRuntimeError: boom")
    result = result_of(
        view("failed", task("sweep", 2, 4, "/s/sweep/out"), task("report", 0, 1)), [failure]
    )
    assert isinstance(result, RunResult)
    assert isinstance(result, RunView)
    assert result.failures == (failure,)
    assert not result.succeeded
    assert result.task("sweep").count("done") == 2
    assert result.outputs() == {"sweep": Path("/s/sweep/out")}
    with pytest.raises(KeyError, match=r"no task 'swep'; its tasks: \['sweep', 'report'\]"):
        result.task("swep")


def test_a_timeout_says_where_the_run_is() -> None:
    """`RunTimeout` names the run, the time waited and its active tasks, and says the run
    goes on."""
    error = RunTimeout("20261201-120000-abcdef", 90.0, view("running", task("sweep", 1, 4)))
    assert isinstance(error, TimeoutError)
    message = str(error)
    assert message.startswith(
        "run 20261201-120000-abcdef did not end within 1 min 30 s (sweep: 1/4"
    )
    assert message.endswith("; it goes on: wait again or cancel it")


class FakeHandle:
    def __init__(self) -> None:
        self.updates: list[dict[str, str]] = []

    def update(self, data: dict[str, str], raw: bool = False) -> None:
        assert raw
        self.updates.append(data)


def test_the_notebook_display_is_one_output_updated_in_place() -> None:
    """In a notebook the progress is one output, shown once and then replaced by each
    view (a display id), as HTML with plain text beside it."""
    shown: list[tuple[dict[str, str], dict[str, Any]]] = []
    handle = FakeHandle()

    def display(data: dict[str, str], **options: Any) -> FakeHandle:
        shown.append((data, options))
        return handle

    board = NotebookDisplay(display)
    board.update(view("running", task("sweep", 1, 4)))
    board.update(view("succeeded", task("sweep", 4, 4)))
    board.close()
    assert len(shown) == 1
    first, options = shown[0]
    assert options == {"raw": True, "display_id": True}
    assert "run 20261201-120000-abcdef (demo): running" in first["text/plain"]
    assert "1/4" in first["text/plain"]
    assert first["text/html"].startswith("<pre>")
    assert len(handle.updates) == 1
    assert "4/4" in handle.updates[0]["text/plain"]
    assert "succeeded" in handle.updates[0]["text/plain"]


def test_plain_python_is_no_notebook() -> None:
    """Outside a kernel (here: pytest, IPython not imported or without a kernel), the
    terminal's display is used."""
    assert not in_notebook()
