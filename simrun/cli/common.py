"""What the commands of ``simrun`` share: the console, the errors that are a user's mistake
(one or a few lines, no traceback), loading task types and preparing a workflow."""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from simrun.plugins import TaskType
    from simrun.workflow import SettingOverride, Workflow

# Only what `simrun --help` needs is imported here: the rest (rich, the client, the
# workflow's pydantic models) is imported by the functions that use it, so that a command
# pays for what it uses (`simrun --help` starts in a tenth of a second).

#: The run failed (or was cancelled, or cannot go on); a service or worker problem.
EXIT_FAILED = 1
#: A mistake in the command or the workflow.
EXIT_USAGE = 2
#: Stopped by Ctrl-C; the run is kept and can go on.
EXIT_INTERRUPTED = 130

#: Exceptions that are the user's mistake or the state of the world, not a bug: shown as
#: their message alone (``--debug`` adds the traceback). By module and name: the module of
#: one is imported only when a command uses it (an error of a module not imported cannot
#: have been raised), so `is_user_error` looks among the modules imported.
USER_ERRORS: tuple[tuple[str, str], ...] = (
    ("simrun.workflow", "WorkflowError"),
    ("simrun.plugins", "PluginError"),
    ("simrun.client", "ClientError"),
    ("simrun.local.machine", "LocalError"),
    ("simrun.runstore", "RunStateError"),
    ("simrun.runstore", "UnknownRunError"),
    ("simrun.db", "SchemaError"),
    ("simrun.core.unitlogs", "LogNotFound"),
    ("builtins", "OSError"),
)
#: Those of `USER_ERRORS` that are a mistake in the command or the workflow (`EXIT_USAGE`).
USAGE_ERRORS: tuple[tuple[str, str], ...] = USER_ERRORS[:2]


def _is_one_of(exc: BaseException, names: Sequence[tuple[str, str]]) -> bool:
    for module, name in names:
        loaded = sys.modules.get(module)
        cls = getattr(loaded, name, None) if loaded is not None else None
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of `USER_ERRORS`."""
    return _is_one_of(exc, USER_ERRORS)


#: Width of the output at least when it is not a terminal (logs, pipes).
PLAIN_WIDTH = 120
#: Widest a table may grow off a terminal.
TABLE_MAX_WIDTH = 1000


def console() -> Console:
    """The console of the command's output (stdout): as wide as the terminal, or at least
    `PLAIN_WIDTH` columns in a log, where a table is as wide as its cells (a path is
    never cut mid-word by a width the log does not have)."""
    out = _plain_console_class()(highlight=False, soft_wrap=False)
    if not out.is_terminal and out.width < PLAIN_WIDTH:
        out.width = PLAIN_WIDTH
    return out


@functools.cache
def _plain_console_class() -> type[Console]:
    from rich.console import Console
    from rich.table import Table

    class PlainConsole(Console):
        """Off a terminal, prints a table at its natural width when that is wider."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            tables = [o for o in objects if isinstance(o, Table)]
            if self.is_terminal or not tables:
                super().print(*objects, **kwargs)
                return
            wide = self.options.update_width(TABLE_MAX_WIDTH)
            natural = max(self.measure(t, options=wide).maximum for t in tables)
            saved = self.width
            self.width = max(saved, natural)
            try:
                super().print(*objects, **kwargs)
            finally:
                self.width = saved

    return PlainConsole


def err_console() -> Console:
    """The console of errors and notes (stderr)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def exit_code_of(exc: BaseException) -> int:
    """The exit status of a command that ended with ``exc``."""
    return EXIT_USAGE if _is_one_of(exc, USAGE_ERRORS) else EXIT_FAILED


def load_types_from_here(
    plugins: Sequence[str] = (), *, only: Collection[str] | None = None
) -> dict[str, TaskType]:
    """The installed task types and those ``plugins`` name (`simrun.plugins.load_types`),
    imported with the current directory on the path, as ``python -m`` would. With
    ``only`` (the types a workflow uses), only the installed types of those names are
    imported: a command that sends a workflow does not wait for the imports of every
    plugin package installed (say, numpy for the examples)."""
    from simrun.plugins import ENTRY_POINT_GROUP, PluginError, load_task_types, load_types

    try:
        if plugins:
            cwd = os.getcwd()
            if cwd not in sys.path:
                sys.path.insert(0, cwd)
        if only is None:
            return load_types(plugins)
        from importlib.metadata import entry_points

        chosen = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name in only]
        types = load_task_types(chosen)
        types.update(load_types_of(plugins))
        return types
    except ValueError as exc:  # two entry points of one name
        if isinstance(exc, PluginError):
            raise
        raise PluginError(str(exc)) from exc


def load_types_of(plugins: Sequence[str]) -> dict[str, TaskType]:
    """The task types ``plugins`` name ("module:OBJECT"), by name."""
    from simrun.plugins import load_plugin_ref

    types: dict[str, TaskType] = {}
    for ref in plugins:
        task_type = load_plugin_ref(ref)
        types[task_type.name] = task_type
    return types


@dataclass(frozen=True)
class Prepared:
    """A workflow ready to submit: the planned document, its text, the settings of every
    task as its type's model reads them, and the directory its source paths start from."""

    path: Path
    doc: Workflow
    text: str
    settings: dict[str, dict[str, Any]]
    base: Path
    #: Whether its tasks may reuse earlier work, and the tasks that run whatever the
    #: store holds (`simrun.core.reuse`).
    reuse: bool = True
    rerun: tuple[str, ...] = ()


def prepare(
    path: Path,
    types: Mapping[str, TaskType],
    *,
    check: bool = True,
    overrides: Sequence[SettingOverride] = (),
    programs: bool = False,
) -> Prepared:
    """Read ``path``, apply the ``--set`` ``overrides``, run the ``plan`` of the task types
    installed here, and check the result (with ``check``: against ``types``, which must
    hold every type it uses; without, only the document's form and its sources, for a
    service to check the rest). `WorkflowError` names every problem (and the ``--set``
    that gave a value it refuses); with ``programs``, also every task whose command's
    program is not found here (it is to run on this machine)."""
    from simrun.client import plan_tasks, submission_text
    from simrun.workflow import (
        WorkflowError,
        apply_overrides,
        blame_overrides,
        check_workflow,
        load_workflow,
        program_problems,
        source_problems,
    )

    original_text = path.read_text(encoding="utf-8") if path.is_file() else ""
    written = load_workflow(path)
    doc = apply_overrides(written, list(overrides), str(path)) if overrides else written
    try:
        if check:  # the document as written first: its problems carry line numbers
            check_workflow(doc, types, str(path), original_text)
        planned = plan_tasks(doc, types)
        text = submission_text(original_text, written, planned)
        settings: dict[str, dict[str, Any]] = {}
        if check:
            settings = check_workflow(planned, types, str(path), text)
    except WorkflowError as exc:
        raise blame_overrides(exc, doc, list(overrides)) if overrides else exc from None
    missing = source_problems(planned, path.parent)
    if programs:
        missing += program_problems(planned, types, original_text)
    if missing:
        raise WorkflowError(missing, str(path))
    return Prepared(path, planned, text, settings, path.parent)


def shell_join(argv: Sequence[str]) -> str:
    """A command line to paste into a shell."""
    return " ".join(shlex.quote(a) for a in argv)
