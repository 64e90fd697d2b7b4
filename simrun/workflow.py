"""The workflow document: its models, how it is read, and how it is checked (every problem
at once, each naming its task, field and line)."""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from simrun.core.environment import program_problem
from simrun.core.layout import InputRef, name_problem, split_task, task_name_problem
from simrun.core.states import MAX_RETRY_DELAY_S, RETRY_KINDS
from simrun.core.wire import is_finite_nonneg
from simrun.errors import SimrunError
from simrun.graph import find_cycle, topological_order
from simrun.plugins import TaskType

#: Bounds past which an override is taken for a typo rather than a request.
MAX_MEMORY_GB = 4096.0
MAX_SCRATCH_GB = 100_000.0
MAX_GPUS = 64
MAX_RETRIES = 100
#: The longest ``timeout_s`` of a unit: a week.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Bounds of a YAML document: nesting, and values once its aliases are expanded.
MAX_YAML_DEPTH = 64
MAX_YAML_VALUES = 1_000_000

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: where (a path, a line when known) and what."""

    loc: Loc
    message: str
    line: int | None = None
    task: str | None = None

    def where(self) -> str:
        """``task 'sweep', settings.grid`` or ``sources.plate``."""
        if self.task is not None and self.loc[:1] == ("tasks",):
            rest = _format_loc(self.loc[2:])
            return f"task {self.task!r}" + (f", {rest}" if rest else "")
        return _format_loc(self.loc)

    def __str__(self) -> str:
        prefix = f"line {self.line}: " if self.line is not None else ""
        where = self.where()
        return f"{prefix}{where}: {self.message}" if where else f"{prefix}{self.message}"


class WorkflowError(SimrunError, ValueError):
    """A document that cannot be run, with all of its problems."""

    def __init__(self, problems: list[Problem], source: str = "workflow") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {p}" for p in problems)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{source}: {count}:\n{lines}")

    def as_dicts(self) -> list[dict[str, Any]]:
        """The problems as JSON-ready dictionaries (for an HTTP 422 answer)."""
        return [
            {
                "loc": list(p.loc),
                "task": p.task,
                "where": p.where(),
                "line": p.line,
                "message": p.message,
            }
            for p in self.problems
        ]


#: The bound of each number of a document, and when 0 is refused, what the refusal adds.
_BOUNDS: dict[str, tuple[float, str | None]] = {
    "memory_base_gb": (MAX_MEMORY_GB, None),
    "memory_per_worker_gb": (MAX_MEMORY_GB, ""),
    "scratch_gb": (MAX_SCRATCH_GB, None),
    "retry_delay_s": (MAX_RETRY_DELAY_S, None),
    "timeout_s": (MAX_TIMEOUT_S, " (leave it out for no bound)"),
}


def _bounded(value: float | None, info: Any) -> float | None:
    """``value`` of the field of ``info`` when it is finite, >= 0 and within `_BOUNDS`."""
    field = info.field_name
    upper, nonzero = _BOUNDS[field]
    if value is None:
        return None
    if not is_finite_nonneg(value):
        raise ValueError(f"{field} must be a finite number >= 0")
    if value > upper:
        raise ValueError(f"{field} = {value:g} is absurd (the most accepted is {upper:g})")
    if value == 0 and nonzero is not None:
        raise ValueError(f"{field} must be more than 0{nonzero}")
    return value


class ResourceOverride(BaseModel):
    """Resources a workflow fixes for one task, each field winning over what is learned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_base_gb: float | None = None
    memory_per_worker_gb: float | None = None
    scratch_gb: float | None = None
    gpus: int | None = None

    _numbers = field_validator("memory_base_gb", "memory_per_worker_gb", "scratch_gb")(_bounded)

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_GPUS:
            raise ValueError(f"gpus must be between 0 and {MAX_GPUS}")
        return value


class TaskSpec(BaseModel):
    """One task of a workflow as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    settings: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(default_factory=dict)
    resources: ResourceOverride | None = None
    #: Errors and timeouts of a unit retried after the first (default: ``--max-retries``).
    retries: int | None = Field(default=None, strict=True)
    #: What is retried at all: "memory", "timeout", "error", exception names (default: all).
    retry_on: list[str] | None = None
    #: Wait before the first retry of an error or timeout, doubled for each further one.
    retry_delay_s: float | None = None
    #: Longest a unit (or the command) may run before it is stopped as timed out.
    timeout_s: float | None = None
    #: Input ports copied into the task's local scratch before it runs, and read there.
    stage: list[str] = Field(default_factory=list)

    @field_validator("stage")
    @classmethod
    def _stage(cls, value: list[str]) -> list[str]:
        for port in value:
            if not isinstance(port, str) or not port.isidentifier():
                raise ValueError(f"{port!r} is not an input port name")
        if len(set(value)) != len(value):
            raise ValueError("names a port twice")
        return value

    @field_validator("retries")
    @classmethod
    def _retries(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_RETRIES:
            raise ValueError(f"retries must be an integer between 0 and {MAX_RETRIES}")
        return value

    @field_validator("retry_on")
    @classmethod
    def _retry_on(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("is empty: leave it out to retry everything, or set retries: 0")
        kinds = ", ".join(RETRY_KINDS)
        for item in value:
            parts = item.split(".")
            named = all(p.isidentifier() for p in parts) and parts[-1][:1].isupper()
            if item not in RETRY_KINDS and not named:
                raise ValueError(
                    f"{item!r} is neither {kinds} nor an exception type name (such as ValueError, "
                    "OSError for its subclasses too, or mypkg.errors.Flaky)"
                )
        return value

    _numbers = field_validator("retry_delay_s", "timeout_s")(_bounded)

    def retry_fields(self) -> dict[str, Any] | None:
        """The task's retry fields that are set, as stored with the task; None for none."""
        fields = {
            "retries": self.retries,
            "retry_on": self.retry_on,
            "retry_delay_s": self.retry_delay_s,
            "timeout_s": self.timeout_s,
        }
        given = {k: v for k, v in fields.items() if v is not None}
        return given or None


class Workflow(BaseModel):
    """A whole workflow document. ``sources`` keeps its order: the first is the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    #: The image of the tasks whose type has none (None: the service's default).
    image: Annotated[str, Field(min_length=1, pattern=r"^\S+$")] | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    tasks: list[TaskSpec]

    @property
    def model(self) -> str:
        """The run's model: the name of the first source, empty without sources."""
        return next(iter(self.sources), "")

    def in_run_image(self, task_type: TaskType, default: str | None = None) -> TaskType:
        """``task_type`` in its own image, else in the run's (``image``, else ``default``)."""
        image = self.image if self.image is not None else default
        if task_type.image is not None or image is None:
            return task_type
        return replace(task_type, image=image)

    def task(self, name: str) -> TaskSpec:
        """The task called ``name`` (KeyError when there is none)."""
        for spec in self.tasks:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def dependencies(self) -> dict[str, set[str]]:
        """Each task to the set of tasks it reads from."""
        deps: dict[str, set[str]] = {t.name: set() for t in self.tasks}
        for spec in self.tasks:
            for ref in spec.inputs.values():
                parsed = InputRef.parse(ref)
                if parsed is not None and parsed.kind == "task":
                    deps[spec.name].add(parsed.name)
        return deps

    def order(self) -> list[str]:
        """Task names in an order that runs every task after its inputs."""
        return topological_order(self.dependencies())


def _format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


#: libyaml's loader when PyYAML has it (ten times faster).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TooBig(SimrunError, ValueError):
    """A document past `MAX_YAML_DEPTH` or `MAX_YAML_VALUES`."""


def _check_events(text: str) -> None:
    """Refuse a document nested deeper than `MAX_YAML_DEPTH` (read flat, as events)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                raise _TooBig(
                    f"the document is nested more than {MAX_YAML_DEPTH} levels deep",
                    mark.line + 1 if mark is not None else None,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_values(root: yaml.Node) -> None:
    """Refuse a document of more than `MAX_YAML_VALUES` values once its aliases are expanded."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                total += size(key_node) + size(value_node)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += size(item)
        sizes[id(node)] = min(total, MAX_YAML_VALUES + 1)
        return sizes[id(node)]

    if size(root) > MAX_YAML_VALUES:
        raise _TooBig(
            f"the document has more than {MAX_YAML_VALUES} values once its aliases are expanded",
            root.start_mark.line + 1,
        )


def _compose(text: str) -> yaml.Node | None:
    """The node tree of ``text``, checked against the depth and size bounds."""
    _check_events(text)
    root: yaml.Node | None = yaml.compose(text, Loader=_LOADER)
    if root is not None:
        _check_values(root)
    return root


def _construct(root: yaml.Node | None) -> Any:
    """The Python value of a composed (and checked) document."""
    if root is None:
        return None
    loader = _LOADER("")
    try:
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _line_map(root: yaml.Node | None) -> tuple[dict[Loc, int], list[Problem]]:
    """Line of every path of a composed YAML document, and its duplicate mapping keys (an
    alias is walked where it was defined only)."""
    lines: dict[Loc, int] = {}
    dupes: list[Problem] = []
    seen_nodes: set[int] = set()

    def walk(node: yaml.Node, loc: Loc) -> None:
        lines.setdefault(loc, node.start_mark.line + 1)
        if id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                if key in seen:
                    dupes.append(
                        Problem((*loc, key), "key given twice", key_node.start_mark.line + 1)
                    )
                seen.add(key)
                lines[(*loc, key)] = key_node.start_mark.line + 1
                walk(value_node, (*loc, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))

    if root is not None:
        walk(root, ())
    return lines, dupes


def _line_for(lines: Mapping[Loc, int], loc: Loc) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _task_name_at(raw: Any, loc: Loc) -> str | None:
    """The name of the task that ``loc`` points into."""
    if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int) and isinstance(raw, dict):
        tasks = raw.get("tasks")
        if isinstance(tasks, list) and loc[1] < len(tasks) and isinstance(tasks[loc[1]], dict):
            name = tasks[loc[1]].get("name")
            if isinstance(name, str) and name:
                return name
    return None


def parse_workflow(text: str, source: str = "workflow") -> Workflow:
    """The document in ``text`` (YAML, which includes JSON), or `WorkflowError`."""
    return parse_workflow_lines(text, source)[0]


def parse_workflow_lines(text: str, source: str = "workflow") -> tuple[Workflow, dict[Loc, int]]:
    """The document in ``text`` and the line of each of its paths, or `WorkflowError`."""
    try:
        root = _compose(text)
        raw = _construct(root)
        lines, dupes = _line_map(root)
    except _TooBig as exc:
        raise WorkflowError([Problem((), str(exc.args[0]), exc.args[1])], source) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise WorkflowError([Problem((), f"not valid YAML: {problem}", line)], source) from exc
    if dupes:
        raise WorkflowError(dupes, source)
    if not isinstance(raw, dict):
        kind = "empty" if raw is None else f"a {type(raw).__name__}"
        raise WorkflowError(
            [Problem((), f"the document is {kind}; expected a mapping with 'tasks'", 1)], source
        )
    try:
        return Workflow.model_validate(raw), lines
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown field" + _field_hint(loc)
            problems.append(Problem(loc, message, _line_for(lines, loc), _task_name_at(raw, loc)))
        raise WorkflowError(problems, source) from exc


def _field_hint(loc: Loc) -> str:
    """`` (did you mean 'tasks'?)`` for an unknown field close to a known one."""
    owners: dict[int, type[BaseModel]] = {1: Workflow, 3: TaskSpec, 4: ResourceOverride}
    owner = owners.get(len(loc))
    if (
        owner is None
        or (len(loc) > 1 and loc[0] != "tasks")
        or (len(loc) == 4 and loc[2] != "resources")
    ):
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(owner.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_workflow(path: Path) -> Workflow:
    """Read and parse the document at ``path`` (`WorkflowError` names the file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError([Problem((), f"cannot read: {exc}")], str(path)) from exc
    return parse_workflow(text, str(path))


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.5)
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if choices:
        return "; known: " + ", ".join(sorted(choices))
    return "; no task types are installed"


def setting_names(model: type[BaseModel]) -> list[str]:
    """The top-level names a settings model accepts: its fields and their aliases."""
    names = set(model.model_fields)
    for info in model.model_fields.values():
        names.update(a for a in (info.alias, info.validation_alias) if isinstance(a, str))
    return sorted(names)


def _unknown_setting(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (settings: {', '.join(known)})"
    return f"unknown setting {name!r}{hint}" if known else f"unknown setting {name!r} (none)"


def _settings_messages(spec: TaskSpec, task_type: TaskType) -> list[tuple[Loc, str]]:
    """The problems of a task's settings, an unknown name one unless the model has
    ``extra="allow"``."""
    model = task_type.settings
    known = setting_names(model)
    messages: list[tuple[Loc, str]] = []
    if model.model_config.get("extra") != "allow":
        messages = [
            ((name,), _unknown_setting(name, known)) for name in spec.settings if name not in known
        ]
    try:
        model.model_validate(spec.settings)
    except ValidationError as exc:
        messages.extend(
            (tuple(err["loc"]), err["msg"].removeprefix("Value error, "))
            for err in exc.errors()
            if not (err["type"] == "extra_forbidden" and len(err["loc"]) == 1)
        )
    return messages


def _input_message(
    spec: TaskSpec,
    ref: str,
    doc: Workflow,
    by_name: Mapping[str, TaskSpec],
    types: Mapping[str, TaskType],
) -> str | None:
    parsed = InputRef.parse(ref)
    if parsed is None:
        return f"{ref!r} is neither 'task.port' nor 'source:name'"
    if parsed.kind == "source":
        if parsed.name in doc.sources:
            return None
        if not doc.sources:
            return f"unknown source {parsed.name!r}; the workflow has no sources"
        return f"unknown source {parsed.name!r}{_suggest(parsed.name, list(doc.sources))}"
    if parsed.name == spec.name:
        return f"task {spec.name!r} reads its own output"
    if parsed.name not in by_name:
        return f"unknown task {parsed.name!r}{_suggest(parsed.name, list(by_name))}"
    upstream = types.get(by_name[parsed.name].type)
    if upstream is not None and parsed.port not in upstream.outputs:
        return (
            f"task {parsed.name!r} (type {upstream.name!r}) has no output port "
            f"{parsed.port!r} (its ports: {', '.join(upstream.outputs)})"
        )
    return None


def _port_messages(spec: TaskSpec, task_type: TaskType) -> Iterator[tuple[Loc, str]]:
    """The input ports of a task its type has not, and those of its type left unconnected."""
    for port in spec.inputs:
        if port not in task_type.inputs:
            known = ", ".join(task_type.inputs) or "none"
            yield (
                ("inputs", port),
                f"type {task_type.name!r} has no input port {port!r} (its ports: {known})",
            )
    for port in task_type.inputs:
        if port not in spec.inputs:
            yield ("inputs",), f"input port {port!r} of type {task_type.name!r} is not connected"


def _task_messages(
    spec: TaskSpec, doc: Workflow, by_name: Mapping[str, TaskSpec], types: Mapping[str, TaskType]
) -> Iterator[tuple[Loc, str]]:
    """The problems of one task, each at its path below the task."""
    task_type = types.get(spec.type)
    if task_type is None:
        yield ("type",), f"unknown task type {spec.type!r}{_suggest(spec.type, list(types))}"
    else:
        for loc, message in _settings_messages(spec, task_type):
            yield ("settings", *loc), message
        yield from _port_messages(spec, task_type)
    for j, port in enumerate(spec.stage):
        if port not in spec.inputs:
            connected = ", ".join(sorted(spec.inputs)) or "none"
            message = f"stage names {port!r}, which is not a connected input port of the task"
            yield ("stage", j), f"{message} (its inputs: {connected})"
    for port, ref in spec.inputs.items():
        wrong = _input_message(spec, ref, doc, by_name, types)
        if wrong is not None:
            yield ("inputs", port), wrong


def validate_workflow(
    doc: Workflow, types: Mapping[str, TaskType], lines: Mapping[Loc, int] | None = None
) -> list[Problem]:
    """Every problem of ``doc`` against the installed ``types`` (but its source paths);
    ``lines`` gives the problems lines."""
    problems: list[Problem] = []

    def add(loc: Loc, message: str, task: str | None = None) -> None:
        problems.append(Problem(loc, message, _line_for(lines, loc) if lines else None, task))

    for name in doc.sources:
        if (why := name_problem(name)) is not None:
            add(("sources", name), f"source name {why}")
    if not doc.tasks:
        add(("tasks",), "a workflow needs at least one task")
    by_name: dict[str, TaskSpec] = {}
    for i, spec in enumerate(doc.tasks):
        if (why := task_name_problem(spec.name)) is not None:
            add(("tasks", i, "name"), f"task name {why}", spec.name)
        if spec.name in by_name:
            add(("tasks", i, "name"), f"task name {spec.name!r} is used twice", spec.name)
        by_name.setdefault(spec.name, spec)
    for i, spec in enumerate(doc.tasks):
        for loc, message in _task_messages(spec, doc, by_name, types):
            add(("tasks", i, *loc), message, spec.name)
    cycle = find_cycle({name: ds - {name} for name, ds in doc.dependencies().items()})
    if cycle is not None:
        add(("tasks",), "the tasks form a cycle: " + " -> ".join(cycle))
    return problems


def check_workflow(
    doc: Workflow,
    types: Mapping[str, TaskType],
    source: str = "workflow",
    text: str | None = None,
    *,
    lines: Mapping[Loc, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Raise `WorkflowError` with every problem of ``doc``; else each task's validated
    settings, JSON-ready, by task name. ``text`` or its ``lines`` give problems lines."""
    problems = validate_workflow(doc, types, lines if lines is not None else _lines_of(text))
    if problems:
        raise WorkflowError(problems, source)
    settings: dict[str, dict[str, Any]] = {}
    for spec in doc.tasks:
        model = types[spec.type].settings.model_validate(spec.settings)
        settings[spec.name] = json.loads(model.model_dump_json())
    return settings


def _lines_of(text: str | None) -> dict[Loc, int]:
    """The line of each path of ``text`` (none when there is no text or it cannot be read)."""
    if text is None:
        return {}
    try:
        return _line_map(_compose(text))[0]
    except (yaml.YAMLError, _TooBig):
        return {}


def _sources(doc: Workflow, base: Path | None) -> tuple[dict[str, Path], list[Problem]]:
    """Each source's path (relative to ``base``), and a problem for each that is missing."""
    found: dict[str, Path] = {}
    problems: list[Problem] = []
    for name, raw in doc.sources.items():
        path = Path(raw) if base is None or Path(raw).is_absolute() else base / raw
        if not path.exists():
            problems.append(Problem(("sources", name), f"file not found: {path}"))
        found[name] = path
    return found, problems


def source_problems(doc: Workflow, base: Path) -> list[Problem]:
    """Sources whose path (relative to ``base``) does not exist."""
    return _sources(doc, base)[1]


def program_problems(
    doc: Workflow, types: Mapping[str, TaskType], text: str | None = None
) -> list[Problem]:
    """Tasks not run in an image whose command's program is not found here (``text`` gives
    the problems lines)."""
    lines = _lines_of(text)
    problems: list[Problem] = []
    for i, spec in enumerate(doc.tasks):
        task_type = types.get(spec.type)
        if task_type is None or task_type.command is None:
            continue
        if doc.in_run_image(task_type).image is not None:
            continue  # its program lives in the image
        problem = program_problem(task_type.command)
        if problem is not None:
            loc: Loc = ("tasks", i, "type")
            problems.append(
                Problem(loc, f"type {spec.type!r}: {problem}", _line_for(lines, loc), spec.name)
            )
    return problems


def source_paths(doc: Workflow, base: Path | None) -> dict[str, Path]:
    """Each source's path in the document (relative to ``base``); `WorkflowError` names
    every source that does not exist."""
    found, problems = _sources(doc, base)
    if problems:
        raise WorkflowError(problems, "workflow")
    return found


def not_uploaded(doc: Workflow, uploaded: Collection[str]) -> list[Problem]:
    """A problem for each source of ``doc`` whose name is not among ``uploaded``."""
    return [
        Problem(("sources", name), f"source {name!r} was not uploaded")
        for name in doc.sources
        if name not in uploaded
    ]


def uploaded_sources(doc: Workflow, uploaded: Mapping[str, Path]) -> dict[str, Path]:
    """Each source's uploaded file or directory; `WorkflowError` names every source that
    was not uploaded (a path of the document is never read instead)."""
    problems = not_uploaded(doc, uploaded)
    if problems:
        raise WorkflowError(problems, "workflow")
    return {name: uploaded[name] for name in doc.sources}


@dataclass(frozen=True)
class SettingOverride:
    """One ``--set TASK.SETTING=VALUE``: ``path`` the setting and keys below it
    (``sweep.solver.tol``), ``value`` read by YAML's rules, ``given`` the option as written."""

    task: str
    path: tuple[str, ...]
    value: Any
    given: str

    @property
    def loc(self) -> Loc:
        """Where the override lands, below the task."""
        return ("settings", *self.path)


def parse_override(given: str) -> SettingOverride:
    """``TASK.SETTING=VALUE`` as a `SettingOverride`; `ValueError` saying what is wrong."""
    name, eq, text = given.partition("=")
    task, setting = split_task(name.strip())
    path = tuple(p.strip() for p in setting.split(".")) if setting else ()
    if not eq or not task or not path or not all(path):
        raise ValueError(
            f"--set {given!r}: expected TASK.SETTING=VALUE, e.g. --set sweep.points=200"
        )
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(f"--set {given!r}: the value is not valid YAML: {problem}") from None
    return SettingOverride(task, path, value, given)


def apply_overrides(doc: Workflow, overrides: list[SettingOverride], source: str) -> Workflow:
    """``doc`` with the ``overrides`` applied in order (a later one wins); `WorkflowError`
    naming each ``--set`` of a task the document has not."""
    names = [t.name for t in doc.tasks]
    problems: list[Problem] = []
    settings = {t.name: copy.deepcopy(t.settings) for t in doc.tasks}
    for o in overrides:
        if o.task not in settings:
            close = difflib.get_close_matches(o.task, names, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"tasks: {', '.join(names)}"
            problems.append(Problem((), f"--set {o.given}: no task {o.task!r} ({hint})"))
            continue
        target = settings[o.task]
        for i, key in enumerate(o.path[:-1]):
            inner = target.get(key)
            if not isinstance(inner, dict):
                if inner is not None:
                    where = ".".join(o.path[: i + 1])
                    problems.append(
                        Problem((), f"--set {o.given}: setting {where!r} is not a mapping")
                    )
                    break
                inner = target[key] = {}
            target = inner
        else:
            target[o.path[-1]] = o.value
    if problems:
        raise WorkflowError(problems, source)
    tasks = [t.model_copy(update={"settings": settings[t.name]}) for t in doc.tasks]
    return doc.model_copy(update={"tasks": tasks})


def blame_overrides(
    error: WorkflowError, doc: Workflow, overrides: list[SettingOverride]
) -> WorkflowError:
    """``error`` with each problem of a setting an override gave saying so."""
    index = {t.name: i for i, t in enumerate(doc.tasks)}
    given: dict[Loc, str] = {}
    for o in overrides:
        if o.task in index:
            given[("tasks", index[o.task], *o.loc)] = o.given
    problems = []
    for p in error.problems:
        hit = next((g for loc, g in given.items() if p.loc[: len(loc)] == loc), None)
        if hit is not None:
            p = Problem(p.loc, f"{p.message} (from --set {hit})", None, p.task)
        problems.append(p)
    return WorkflowError(problems, error.source)
