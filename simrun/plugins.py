"""The plugin interface: task types (entry points of `ENTRY_POINT_GROUP`, or ``--plugins``
``"module:OBJECT"`` references), their resource hints, and how they are loaded. A type's
callables are ``"module:function"`` strings a worker imports itself (`resolve`)."""

from __future__ import annotations

import importlib
import io
import keyword
import math
import re
import shlex
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel

from simrun.errors import SimrunError

__all__ = [
    "ENTRY_POINT_GROUP",
    "ResourceHint",
    "TaskPaths",
    "TaskType",
    "UnitOutputs",
    "load_task_types",
    "resolve",
]

ENTRY_POINT_GROUP = "simrun.task_types"

#: The attributes of a `TaskType` that hold ``"module:function"`` references.
REFERENCE_FIELDS = ("count_units", "setup", "compute_unit", "merge", "plan")

#: The names a ``command`` template may use in braces (see `TaskType.command`).
COMMAND_PLACEHOLDERS = ("settings", "out", "input")

#: One lexical item of a template part: an escaped brace, a placeholder, or a lone brace.
COMMAND_BRACES = re.compile(r"\{\{|\}\}|\{[^{}]*\}|[{}]")


def command_parts(template: str) -> list[str]:
    """The parts of a ``command`` template, split like a POSIX shell splits words ('#' is
    no comment); `ValueError` for an unclosed quote or a lone backslash."""
    lexer = shlex.shlex(io.StringIO(template), posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def command_template_problem(template: str) -> str | None:
    """What is wrong with a ``command`` template (braces: `COMMAND_PLACEHOLDERS`, ``{{``
    and ``}}`` literal), as a sentence; None if it can be expanded."""
    try:
        parts = command_parts(template)
    except ValueError as exc:
        return f"command {template!r} cannot be split: {exc} (check its quotes and backslashes)"
    if not parts:
        return "command is empty"
    known = ", ".join("{" + p + "}" for p in COMMAND_PLACEHOLDERS)
    for part in parts:
        for match in COMMAND_BRACES.finditer(part):
            item = match.group()
            if item in ("{", "}"):
                return (
                    f"command {template!r}: the part {part!r} has an unmatched {item!r}; "
                    f"write {item * 2!r} for a literal brace"
                )
            if item not in ("{{", "}}") and item[1:-1] not in COMMAND_PLACEHOLDERS:
                return (
                    f"command {template!r} uses the unknown placeholder {item!r}; the "
                    f"placeholders are {known} (write {{{{ and }}}} for literal braces)"
                )
    return None


class PluginError(SimrunError, ValueError):
    """A task type or a reference to plugin code that cannot be used, and why."""


@dataclass(frozen=True)
class ResourceHint:
    """What a task type asks for before anything is learned: ``memory_base_gb`` besides its
    worker processes, ``memory_per_worker_gb`` for each."""

    memory_base_gb: float = 2.0
    memory_per_worker_gb: float = 6.0
    scratch_gb: float = 0.0
    gpus: int = 0


@dataclass(frozen=True)
class TaskPaths:
    """Where a task reads and writes: the store, its run and task directories, its output
    directory (``task_dir / "out"``), the directory behind each input port, and scratch."""

    store: Path
    run_dir: Path
    task_dir: Path
    out: Path
    inputs: dict[str, Path]
    scratch: Path

    @classmethod
    def for_task(
        cls,
        store: Path,
        run_id: str,
        task: str,
        inputs: dict[str, Path] | None = None,
        scratch: Path | None = None,
    ) -> TaskPaths:
        """The conventional layout: ``store/runs/<run_id>/<task>/out``."""
        run_dir = store / "runs" / run_id
        task_dir = run_dir / task
        return cls(
            store=store,
            run_dir=run_dir,
            task_dir=task_dir,
            out=task_dir / "out",
            inputs=dict(inputs or {}),
            scratch=scratch if scratch is not None else task_dir / "scratch",
        )

    def checkpoint(self, index: int) -> Path:
        """Where unit ``index`` of a type with ``checkpoints=True`` keeps what it resumes
        from, in the store (made before the unit runs, removed once it is done)."""
        return self.task_dir / "checkpoints" / str(index)


@dataclass(frozen=True)
class TaskType:
    """One kind of task: *splittable* (``count_units`` + ``compute_unit``, optionally
    ``setup`` and ``merge``) or *unsplit* (one ``command`` run through ``simrun-exec``).
    Callables get the validated ``settings``; ``compute_unit`` may run twice for an index,
    so it writes outputs of the settings and index only, each atomically."""

    name: str
    settings: type[BaseModel]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("out",)
    hint: ResourceHint = field(default_factory=ResourceHint)
    checkpoints: bool = False
    command: str | None = None
    uses_cores: bool = False
    count_units: str | None = None
    setup: str | None = None
    compute_unit: str | None = None
    merge: str | None = None
    plan: str | None = None
    image: str | None = None
    cost_setting: str | None = None
    description: str = ""

    @property
    def splittable(self) -> bool:
        """Whether the task's work is cut into units (it has a ``compute_unit``)."""
        return self.compute_unit is not None


#: The class attribute of a settings model that declares its units' outputs per index.
UNIT_OUTPUTS_ATTR = "simrun_unit_outputs"


@dataclass(frozen=True)
class UnitOutputs:
    """A splittable type's units' outputs, declared to have units reused one by one across
    runs: the settings model's ``ClassVar`` ``simrun_unit_outputs = UnitOutputs(files=
    ("part-{index:05d}.npy",), count_settings=("chunks",))``. ``files``: what unit
    ``index`` alone writes under ``out`` (``merge`` leaves them); ``count_settings``: the
    settings that change only how many units there are. A unit equal but for those takes
    the earlier unit's files instead of running."""

    files: tuple[str, ...]
    count_settings: tuple[str, ...] = ()

    def paths(self, index: int) -> list[str]:
        """The files of unit ``index``, relative to the task's out directory."""
        return [pattern.format(index=index) for pattern in self.files]


def unit_outputs(task_type: TaskType) -> UnitOutputs | None:
    """What ``task_type`` declares of its units' outputs; None if nothing or not splittable."""
    found = getattr(task_type.settings, UNIT_OUTPUTS_ATTR, None)
    if not task_type.splittable or not isinstance(found, UnitOutputs):
        return None
    return found


def _pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` is not a usable `UnitOutputs` file pattern, or None."""
    if not isinstance(pattern, str) or not pattern.strip():
        return f"{pattern!r} is not a file name"
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None]
        first, second = pattern.format(index=0), pattern.format(index=1)
    except (ValueError, KeyError, IndexError) as exc:
        return f"{pattern!r} cannot be formatted with an index: {exc}"
    if any(f != "index" for f in fields) or not fields:
        return f"{pattern!r} must use {{index}} and no other placeholder"
    if first == second:
        return f"{pattern!r} names the same file for every index"
    path = PurePosixPath(first)
    if path.is_absolute() or ".." in path.parts or "\\" in first:
        return f"{pattern!r} must be a relative path inside the out directory, without '..'"
    return None


def unit_outputs_problems(task_type: TaskType) -> list[str]:
    """What is wrong with the `UnitOutputs` a type's settings model declares, as sentences."""
    found = getattr(task_type.settings, UNIT_OUTPUTS_ATTR, None)
    if found is None:
        return []
    where = f"settings {task_type.settings.__name__}.{UNIT_OUTPUTS_ATTR}"
    if not isinstance(found, UnitOutputs):
        return [f"{where} is a {type(found).__name__}, not a simrun.plugins.UnitOutputs"]
    if not task_type.splittable:
        return [f"{where}: only a splittable type (with a compute_unit) has units to reuse"]
    problems: list[str] = []
    declared: Any = found  # plugin values are unchecked at run time: check them here
    if not isinstance(declared.files, tuple) or not declared.files:
        problems.append(f"{where}.files must be a non-empty tuple of file patterns")
    else:
        problems += [f"{where}.files: {p}" for f in declared.files if (p := _pattern_problem(f))]
    fields = getattr(task_type.settings, "model_fields", {})
    if not isinstance(declared.count_settings, tuple):
        problems.append(f"{where}.count_settings must be a tuple of setting names")
    else:
        problems += [
            f"{where}.count_settings: {name!r} is not a field of the model "
            f"(fields: {', '.join(sorted(fields)) or 'none'})"
            for name in found.count_settings
            if name not in fields
        ]
    return problems


def _reference_problem(ref: object, form: str = "module:function") -> str | None:
    """Why ``ref`` is not a well-formed ``"module:attribute"`` string (shown as ``form``)."""
    if not isinstance(ref, str):
        return f"is {type(ref).__name__}, not a '{form}' string"
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        return f"{ref!r} is not of the form '{form}'"
    for path, what in ((module, "a module path"), (attr, "an attribute name")):
        if not all(p.isidentifier() and not keyword.iskeyword(p) for p in path.split(".")):
            return f"{ref!r}: {path!r} is not {what}"
    return None


def _import_object(ref: str, what: str) -> Any:
    """The object a well-formed ``"module:attr.path"`` names; `PluginError` says which step
    failed."""
    module_name, _, attr_path = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"{what} {ref!r}: cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # a plugin module may raise anything on import
        raise PluginError(
            f"{what} {ref!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for attr in attr_path.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError as exc:
            raise PluginError(
                f"{what} {ref!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from exc
    return obj


def resolve(ref: str) -> Callable[..., Any]:
    """Import the function that a ``"module:function"`` string names; `PluginError` says
    which step failed (the form, the import, the attribute, not callable)."""
    problem = _reference_problem(ref)
    if problem is not None:
        raise PluginError(f"reference {problem}")
    obj = _import_object(ref, "reference")
    if not callable(obj):
        attr_path = ref.partition(":")[2]
        raise PluginError(
            f"reference {ref!r}: {attr_path!r} is a {type(obj).__name__}, not callable"
        )
    return obj  # type: ignore[no-any-return]  # getattr chain is Any by nature


def load_plugin_ref(ref: str) -> TaskType:
    """The `TaskType` a ``"module:OBJECT"`` reference names (``--plugins``), checked as
    `load_task_types` checks entry points; `PluginError` says which step failed."""
    problem = _reference_problem(ref, "module:OBJECT")
    if problem is not None:
        raise PluginError(f"plugin reference {problem}")
    obj = _import_object(ref, "plugin reference")
    problems = task_type_problems(obj)
    if problems:
        raise PluginError(f"plugin reference {ref!r}: task type {'; '.join(problems)}")
    assert isinstance(obj, TaskType)
    return obj


def _is_nonneg_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _kind_problems(tt: Any) -> Iterable[str]:
    if not isinstance(tt.name, str) or not tt.name.strip():
        yield "has an empty name"
    if not (isinstance(tt.settings, type) and issubclass(tt.settings, BaseModel)):
        yield "settings is not a pydantic BaseModel subclass"
    if tt.command is None and tt.compute_unit is None:
        yield "has neither a command nor a compute_unit, so it can never run"
    if tt.command is not None and tt.compute_unit is not None:
        yield "has both a command and a compute_unit; a type is one or the other"
    if tt.compute_unit is not None and tt.count_units is None:
        yield "has a compute_unit but no count_units, so its units cannot be counted"
    if tt.command is not None and (not isinstance(tt.command, str) or not tt.command.strip()):
        yield "command is empty"
    elif isinstance(tt.command, str) and (problem := command_template_problem(tt.command)):
        yield problem
    for attr in REFERENCE_FIELDS:
        ref = getattr(tt, attr)
        if ref is not None and (problem := _reference_problem(ref)) is not None:
            yield f"{attr}: {problem}"


def _port_problems(tt: Any) -> Iterable[str]:
    for attr in ("inputs", "outputs"):
        ports = getattr(tt, attr)
        if not isinstance(ports, tuple) or not all(
            isinstance(p, str) and p.isidentifier() for p in ports
        ):
            yield f"{attr} must be a tuple of identifiers, got {ports!r}"
        elif len(set(ports)) != len(ports):
            yield f"{attr} has a port named twice: {ports!r}"
    if isinstance(tt.outputs, tuple) and not tt.outputs:
        yield "has no output port"


def _hint_problems(hint: Any) -> Iterable[str]:
    if not isinstance(hint, ResourceHint):
        yield "hint is not a simrun.plugins.ResourceHint"
        return
    for name in ("memory_base_gb", "memory_per_worker_gb", "scratch_gb"):
        if not _is_nonneg_number(getattr(hint, name)):
            yield f"hint.{name} must be a finite number >= 0"
    if not isinstance(hint.gpus, int) or isinstance(hint.gpus, bool) or hint.gpus < 0:
        yield "hint.gpus must be an integer >= 0"


def _settings_problems(tt: Any) -> Iterable[str]:
    if not (isinstance(tt.settings, type) and issubclass(tt.settings, BaseModel)):
        return
    yield from unit_outputs_problems(tt)
    fields = tt.settings.model_fields
    if tt.cost_setting is not None and tt.cost_setting not in fields:
        known = ", ".join(sorted(fields)) or "none"
        yield (
            f"cost_setting {tt.cost_setting!r} is not a field of its settings "
            f"model {tt.settings.__name__} (fields: {known})"
        )


def task_type_problems(task_type: object) -> list[str]:
    """Everything that stops ``task_type`` from ever running, as sentences; empty if fine."""
    if not isinstance(task_type, TaskType):
        return [f"is a {type(task_type).__name__}, not a simrun.plugins.TaskType"]
    tt: Any = task_type  # untyped at run time: check the values, not the annotations
    return [
        *_kind_problems(tt),
        *_port_problems(tt),
        *_hint_problems(tt.hint),
        *_settings_problems(tt),
    ]


def _describe(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    origin = f" (distribution {dist.name})" if dist is not None else ""
    return f"entry point {ep.name!r} = {ep.value!r}{origin}"


def load_task_types(eps: Iterable[EntryPoint] | None = None) -> dict[str, TaskType]:
    """The task types of the entry points ``eps`` (default: of `ENTRY_POINT_GROUP`), by
    name; one `PluginError` names every unusable one, `ValueError` a name registered twice."""
    if eps is None:
        eps = entry_points(group=ENTRY_POINT_GROUP)
    found: dict[str, tuple[TaskType, EntryPoint]] = {}
    errors: list[str] = []
    for ep in eps:
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001  # any import failure of a plugin is reported
            errors.append(f"{_describe(ep)} failed to load: {type(exc).__name__}: {exc}")
            continue
        problems = task_type_problems(obj)
        if problems:
            errors.extend(f"{_describe(ep)}: task type {p}" for p in problems)
            continue
        assert isinstance(obj, TaskType)
        if obj.name != ep.name:
            errors.append(
                f"{_describe(ep)}: the entry point's name differs from the task type's "
                f"name {obj.name!r}"
            )
            continue
        if obj.name in found:
            first = found[obj.name][1]
            raise ValueError(
                f"task type {obj.name!r} is registered twice: by {_describe(first)} "
                f"and by {_describe(ep)}"
            )
        found[obj.name] = (obj, ep)
    if errors:
        raise PluginError("cannot load task types:\n  " + "\n  ".join(errors))
    return {name: tt for name, (tt, _) in sorted(found.items())}


def load_types(plugins: Sequence[str] = ()) -> dict[str, TaskType]:
    """The installed task types, replaced or joined by those ``plugins`` name."""
    types = load_task_types()
    for ref in plugins:
        task_type = load_plugin_ref(ref)
        types[task_type.name] = task_type
    return types


def unchecked_count(task_type: TaskType, settings: Mapping[str, Any]) -> object:
    """What the type's ``count_units`` returns for ``settings``, unchecked (in a thread)."""
    assert task_type.count_units is not None
    parsed = task_type.settings.model_validate(dict(settings))
    result: object = resolve(task_type.count_units)(parsed)
    return result


def count_units(task_type: TaskType, settings: Mapping[str, Any]) -> int:
    """Run the type's ``count_units`` on its parsed settings (in a thread)."""
    count = unchecked_count(task_type, settings)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count_units of {task_type.name!r} returned {count!r}, not an int >= 0")
    return count
