"""Preparing a workflow to submit, for the command line, the Python API and the Editor:
read, ``--set``, check, ``plan``, check again, find its sources."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import yaml

from simrun.app.types import load_types_from_here
from simrun.client import plan_tasks, submission_text
from simrun.core.intake import InputLimits, tasks_problem
from simrun.workflow import (
    Problem,
    SettingOverride,
    Workflow,
    WorkflowError,
    apply_overrides,
    blame_overrides,
    check_workflow,
    not_uploaded,
    parse_workflow_lines,
    program_problems,
    source_paths,
    source_problems,
)

if TYPE_CHECKING:
    from simrun.plugins import TaskType

#: A workflow: a path (`pathlib.Path`, or a one-line string with no ``: `` that does not
#: start with ``{``), the document as YAML or JSON text, or the document as a dict.
WorkflowInput: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any]"

#: The name problems of a document given as text or a dict are reported under.
TEXT_SOURCE = "workflow"


@dataclass(frozen=True)
class Prepared:
    """A workflow ready to submit: the planned document, its text, each task's checked
    settings (empty when not checked here), its sources' directory, its problems' name."""

    doc: Workflow
    text: str
    settings: dict[str, dict[str, Any]]
    base: Path
    source: str = TEXT_SOURCE
    reuse: bool = True
    rerun: tuple[str, ...] = ()

    def sources(self) -> dict[str, Path]:
        """Each source's file (`WorkflowError` names those that do not exist)."""
        return source_paths(self.doc, self.base)


def _is_path(workflow: str) -> bool:
    text = workflow.strip()
    return "\n" not in text and ": " not in text and not text.startswith("{")


def read_input(
    workflow: WorkflowInput, base: str | os.PathLike[str] | None = None
) -> tuple[str, str, Path]:
    """The document's text, the name its problems are reported under, and the directory
    of its sources (``base``, else the file's, else the current one)."""
    here = Path(base) if base is not None else Path.cwd()
    if isinstance(workflow, Mapping):
        try:
            text = yaml.safe_dump(dict(workflow), sort_keys=False)
        except yaml.YAMLError as exc:
            problem = Problem((), f"the dict cannot be written as YAML: {exc}")
            raise WorkflowError([problem], TEXT_SOURCE) from exc
        return text, TEXT_SOURCE, here
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
    return workflow, TEXT_SOURCE, here


def prepare_to_send(
    workflow: WorkflowInput,
    plugins: Sequence[str] = (),
    *,
    base: str | os.PathLike[str] | None = None,
    overrides: Sequence[SettingOverride] = (),
) -> tuple[Prepared, dict[str, TaskType]]:
    """``workflow`` prepared for a service, and the types it uses that are installed here
    (and ``plugins``): they plan their tasks; it is checked here only when all are."""
    text, source, where = read_input(workflow, base)
    used = [t.type for t in parse_workflow_lines(text, source)[0].tasks]
    types = load_types_from_here(plugins, only=used)
    check = all(t in types for t in used)
    return prepare_text(text, source, where, types, check=check, overrides=overrides), types


def prepare(
    workflow: WorkflowInput,
    types: Mapping[str, TaskType],
    *,
    base: str | os.PathLike[str] | None = None,
    check: bool = True,
    overrides: Sequence[SettingOverride] = (),
    programs: bool = False,
) -> Prepared:
    """``workflow`` (`read_input`) prepared by `prepare_text`."""
    text, source, where = read_input(workflow, base)
    return prepare_text(
        text, source, where, types, check=check, overrides=overrides, programs=programs
    )


def prepare_text(
    text: str,
    source: str,
    base: Path,
    types: Mapping[str, TaskType],
    *,
    check: bool = True,
    overrides: Sequence[SettingOverride] = (),
    programs: bool = False,
    uploaded: Collection[str] | None = None,
    limits: InputLimits | None = None,
) -> Prepared:
    """``text`` with the ``overrides``, checked (all of it with ``check``), planned and
    checked again, its sources under ``base`` or ``uploaded``; `WorkflowError` names every
    problem (and the ``--set`` behind it). Blocking: plugin code runs."""
    written, lines = parse_workflow_lines(text, source)
    too_many = tasks_problem(len(written.tasks), limits) if limits is not None else None
    if too_many is not None:
        raise WorkflowError([Problem(("tasks",), too_many)], source)
    doc = apply_overrides(written, list(overrides), source) if overrides else written
    try:
        if check:  # the document as written first: its problems carry line numbers
            check_workflow(doc, types, source, lines=lines)
        planned = plan_tasks(doc, types)
        final = submission_text(text, written, planned)
        settings = check_workflow(planned, types, source, final) if check else {}
    except WorkflowError as exc:
        raise blame_overrides(exc, doc, list(overrides)) if overrides else exc from None
    if uploaded is not None:
        missing = not_uploaded(planned, uploaded)
    else:
        missing = source_problems(planned, base)
    if programs:
        missing += program_problems(planned, types, text)
    if missing:
        raise WorkflowError(missing, source)
    return Prepared(planned, final, settings, base, source)
