"""A workflow as the Python API takes it — a path, a YAML or JSON string, or a dict — read,
planned and checked as ``simrun validate`` and ``simrun run`` check a file: every problem
is a `simrun.workflow.WorkflowError` with the same lines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import yaml

from simrun.client import plan_tasks, submission_text
from simrun.workflow import (
    Problem,
    WorkflowError,
    check_workflow,
    parse_workflow_lines,
    source_paths,
    source_problems,
)

if TYPE_CHECKING:
    from simrun.plugins import TaskType
    from simrun.workflow import Workflow

#: What the API accepts as a workflow: a path (`pathlib.Path`, or a one-line string with no
#: ``: `` that does not start with ``{``), the document itself as YAML or JSON text, or
#: the document as a dict.
WorkflowInput: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any]"

#: The name problems of a document given as text or a dict are reported under.
TEXT_SOURCE = "workflow"


@dataclass(frozen=True)
class Prepared:
    """A workflow ready to submit: the planned document and its text, each task's settings
    as its type's model read them (empty when not checked here), and its sources' files."""

    doc: Workflow
    text: str
    settings: dict[str, dict[str, Any]]
    base: Path
    sources: dict[str, Path]


def _is_path(workflow: str) -> bool:
    text = workflow.strip()
    return "\n" not in text and ": " not in text and not text.startswith("{")


def read_input(
    workflow: WorkflowInput, base: str | os.PathLike[str] | None
) -> tuple[str, str, Path]:
    """The document's text, the name its problems are reported under (the file, or
    ``workflow``), and the directory its sources are relative to (``base``, else the
    file's directory, else the current one)."""
    if isinstance(workflow, Mapping):
        try:
            text = yaml.safe_dump(dict(workflow), sort_keys=False)
        except yaml.YAMLError as exc:
            problem = Problem((), f"the dict cannot be written as YAML: {exc}")
            raise WorkflowError([problem], TEXT_SOURCE) from exc
        return text, TEXT_SOURCE, Path(base) if base is not None else Path.cwd()
    if isinstance(workflow, os.PathLike) or (isinstance(workflow, str) and _is_path(workflow)):
        path = Path(workflow)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # as `simrun validate` says it
            raise WorkflowError([Problem((), f"cannot read: {exc}")], str(path)) from exc
        return text, str(path), Path(base) if base is not None else path.parent
    if not isinstance(workflow, str):  # a caller without a type checker
        kind = type(workflow).__name__  # type: ignore[unreachable]  # see the line above
        problem = Problem((), f"a workflow is a path, a YAML string or a dict, not a {kind}")
        raise WorkflowError([problem], TEXT_SOURCE)
    return workflow, TEXT_SOURCE, Path(base) if base is not None else Path.cwd()


def task_types_of(text: str, source: str) -> list[str]:
    """The task types the document uses (`WorkflowError` when it does not parse)."""
    doc, _ = parse_workflow_lines(text, source)
    return [t.type for t in doc.tasks]


def prepare(
    text: str, source: str, base: Path, types: Mapping[str, TaskType], *, check: bool = True
) -> Prepared:
    """Parse ``text``, check it against ``types`` (with ``check``; without, only its form
    and its sources, for a service to check the rest), run the ``plan`` of its types
    installed here and find its sources under ``base``. `WorkflowError` names every
    problem, as `simrun.cli.common.prepare` does for a file."""
    doc, lines = parse_workflow_lines(text, source)
    if check:  # the document as given first: its problems carry line numbers
        check_workflow(doc, types, source, lines=lines)
    planned = plan_tasks(doc, types)
    final = submission_text(text, doc, planned)
    settings = check_workflow(planned, types, source, final) if check else {}
    missing = source_problems(planned, base)
    if missing:
        raise WorkflowError(missing, source)
    return Prepared(planned, final, settings, base, source_paths(planned, base))
