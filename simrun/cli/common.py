"""What the commands of ``simrun`` share: the console, and the errors that are a user's
mistake (one or a few lines, no traceback)."""

from __future__ import annotations

import functools
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

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
    ("simrun.core.signing", "JobKeyError"),
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


def shell_join(argv: Sequence[str]) -> str:
    """A command line to paste into a shell."""
    return " ".join(shlex.quote(a) for a in argv)
