"""Reading a submission (``POST /runs``) in a thread: its body, workflow and sources, each
a file or directory the client uploaded (never a path of the service's host), bounded by
`InputLimits`."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simrun.core.intake import (
    InputLimits,
    decoded_size,
    file_count_problem,
    file_size_problem,
    tasks_problem,
    upload_path_problem,
    workflow_size_problem,
)
from simrun.core.layout import name_problem
from simrun.plugins import TaskType
from simrun.workflow import (
    Problem,
    Workflow,
    WorkflowError,
    check_workflow,
    parse_workflow_lines,
)


class DirectoryFile(BaseModel):
    """One file of an uploaded directory: its path inside the directory ("a/b.txt")."""

    model_config = ConfigDict(extra="forbid")
    path: str
    content_b64: str


class SourceUpload(BaseModel):
    """A source sent with a submission: a file (``content_b64``) or a directory
    (``files``), named ``filename`` in the run's copy."""

    model_config = ConfigDict(extra="forbid")
    filename: str = ""
    content_b64: str | None = None
    files: list[DirectoryFile] | None = None


class SubmitBody(BaseModel):
    """A submission: the workflow as written, its sources, and what may be reused
    (`simrun.core.reuse`)."""

    model_config = ConfigDict(extra="forbid")
    workflow: str
    sources: dict[str, SourceUpload] = Field(default_factory=dict)
    reuse: bool = True
    rerun: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Received:
    """A submission read and checked, and where each uploaded source was written."""

    doc: Workflow
    settings: dict[str, dict[str, Any]]
    text: str
    sources: dict[str, Path]
    reuse: bool = True
    rerun: tuple[str, ...] = ()


def _body(raw: bytes) -> SubmitBody:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        problem = Problem(("body",), f"the body is not JSON: {exc}")
        raise WorkflowError([problem], "request") from exc
    try:
        return SubmitBody.model_validate(data)
    except ValidationError as exc:
        problems = [
            Problem(("body", *err["loc"]), err["msg"].removeprefix("Value error, "))
            for err in exc.errors()
        ]
        raise WorkflowError(problems, "request") from exc


def upload_problems(
    doc: Workflow, uploads: Mapping[str, SourceUpload], limits: InputLimits
) -> list[Problem]:
    """Every problem of the uploads of a submission (missing, unknown, badly named, past the
    limits), before a byte is decoded."""
    problems = [
        Problem(
            ("sources", name),
            f"source {name!r} was not uploaded: through the service a source is a file or "
            "directory sent with the workflow (simrun submit sends them), never a path of "
            "the service's host",
        )
        for name in doc.sources
        if name not in uploads
    ]
    files = 0
    for name, upload in uploads.items():
        found, count = _upload_problems(name, upload, doc, limits)
        problems += [Problem(("sources", name), message) for message in found]
        files += count
    if (why := file_count_problem(files, limits)) is not None:
        problems.append(Problem(("sources",), why))
    return problems


def _upload_problems(
    name: str, upload: SourceUpload, doc: Workflow, limits: InputLimits
) -> tuple[list[str], int]:
    """The problems of one upload, and the files it counts."""
    if (why := name_problem(name)) is not None:
        return [f"source name {why}"], 0
    if name not in doc.sources:
        known = ", ".join(repr(s) for s in doc.sources) or "none"
        return [f"{name!r} was uploaded but is not a source of the workflow ({known})"], 0
    out = []
    if upload.filename and (why := name_problem(upload.filename)) is not None:
        out.append(f"filename {why}")
    if (upload.content_b64 is None) == (upload.files is None):
        return [*out, "give either content_b64 (a file) or files (a directory)"], 0
    if upload.content_b64 is not None:
        size = decoded_size(upload.content_b64)
        why = file_size_problem(size, limits, f"source {name!r}")
        return [*out, *([why] if why else [])], 1
    return out + _directory_problems(upload.files or [], limits), len(upload.files or [])


def _directory_problems(files: list[DirectoryFile], limits: InputLimits) -> list[str]:
    """The problems of the files of an uploaded directory: bad or repeated paths, a path
    both a file and a directory, a file past its size."""
    out: list[str] = []
    seen: set[str] = set()
    for entry in files:
        if (why := upload_path_problem(entry.path, limits)) is not None:
            out.append(why)
            continue
        if entry.path in seen:
            out.append(f"path {entry.path!r} is given twice")
        seen.add(entry.path)
        size = decoded_size(entry.content_b64)
        if (why := file_size_problem(size, limits, f"file {entry.path!r}")) is not None:
            out.append(why)
    parents = {"/".join(p.split("/")[:i]) for p in seen for i in range(1, p.count("/") + 1)}
    out += [f"path {clash!r} is both a file and a directory" for clash in sorted(parents & seen)]
    return out


def _decode(content_b64: str, name: str, what: str, limits: InputLimits) -> bytes:
    try:
        data = base64.b64decode(content_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        problem = Problem(("sources", name), f"{what}: content_b64 is not valid base64")
        raise WorkflowError([problem], "sources") from exc
    if (why := file_size_problem(len(data), limits, what)) is not None:
        raise WorkflowError([Problem(("sources", name), why)], "sources")
    return data


def write_uploads(
    uploads: Mapping[str, SourceUpload], directory: Path, limits: InputLimits
) -> dict[str, Path]:
    """Decode checked uploads into ``directory``: each source's file or directory."""
    written: dict[str, Path] = {}
    root = directory.resolve()
    for name, upload in uploads.items():
        target = root / name / (upload.filename or name)
        if upload.content_b64 is not None:
            data = _decode(upload.content_b64, name, f"source {name!r}", limits)
            target.parent.mkdir(parents=True)
            target.write_bytes(data)
        else:
            target.mkdir(parents=True)
            for entry in upload.files or []:
                data = _decode(entry.content_b64, name, f"file {entry.path!r}", limits)
                path = target / entry.path
                if not path.resolve().is_relative_to(target):  # upload_path_problem refused it
                    raise WorkflowError(
                        [Problem(("sources", name), f"path {entry.path!r} leaves the source")]
                    )
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        written[name] = target
    return written


def receive_submission(
    raw: bytes, types: Mapping[str, TaskType], limits: InputLimits, directory: Path
) -> Received:
    """Read, check and write out a submission's body (blocking: call it in a thread).
    `WorkflowError` with every problem found; nothing is written unless all is well."""
    body = _body(raw)
    size = len(body.workflow.encode("utf-8"))
    if (why := workflow_size_problem(size, limits)) is not None:
        raise WorkflowError([Problem(("workflow",), why)], "workflow")
    doc, lines = parse_workflow_lines(body.workflow)
    if (why := tasks_problem(len(doc.tasks), limits)) is not None:
        raise WorkflowError([Problem(("tasks",), why, lines.get(("tasks",)))], "workflow")
    settings = check_workflow(doc, types, "workflow", lines=lines)
    problems = upload_problems(doc, body.sources, limits)
    if problems:
        raise WorkflowError(problems, "sources")
    sources = write_uploads(body.sources, directory, limits)
    return Received(doc, settings, body.workflow, sources, body.reuse, tuple(body.rerun))
