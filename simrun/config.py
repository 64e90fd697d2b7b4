"""The configuration every process shares: defaults, environment variables, and `Flag`, how
a field of a settings dataclass is given on the command line (`click_options` makes a
command's options from the fields). Only the entry points read the environment."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints
from urllib.parse import urlsplit

import click

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: The service the client commands talk to when ``--url`` / ``SIMRUN_URL`` gives none.
DEFAULT_URL = "http://127.0.0.1:8765"
DEFAULT_STORE = Path("simrun-store")

ENV_URL = "SIMRUN_URL"
ENV_TOKEN = "SIMRUN_TOKEN"
ENV_STORE = "SIMRUN_STORE"
ENV_ENGINE = "SIMRUN_ENGINE"
ENV_JOB_KEY = "SIMRUN_JOB_KEY"
ENV_JOB_KEY_FILE = "SIMRUN_JOB_KEY_FILE"

POSITIVE = click.FloatRange(min=0, min_open=True)
DIR = click.Path(file_okay=False, path_type=Path)


@dataclass(frozen=True)
class Flag:
    """How a setting is given on the command line: ``--NAME`` (``--NAME/--no-NAME`` when it
    is on by default), its help, click type and environment variable; ``default`` is the
    command line's for a field that has none."""

    name: str
    help: str
    type: Any = None
    env: str | None = None
    multiple: bool = False
    metavar: str | None = None
    default: Any = None
    #: Given by the environment only: the option is hidden and never written to a child's
    #: command line (the process list shows command lines).
    secret: bool = False

    def but(self, **changes: Any) -> Flag:
        return dataclasses.replace(self, **changes)

    def option(self, dest: str, default: Any) -> Callable[[F], F]:
        """The click option of this flag, giving parameter ``dest``."""
        switch = f"--{self.name}/--no-{self.name}" if default is True else f"--{self.name}"
        shown = default is not None and default is not False and default != ()
        return click.option(
            switch, dest, type=self.type, default=default, multiple=self.multiple,
            is_flag=isinstance(default, bool), envvar=self.env, show_envvar=bool(self.env),
            show_default=shown, metavar=self.metavar, help=self.help, hidden=self.secret,
        )  # fmt: skip


class Group(dict[str, Flag]):
    """The flags of the fields of a settings value that a setting holds (`LIMITS`): each is
    an option of its own."""


# The settings that several processes or commands take, declared once.
STORE = Flag(
    "store", "The run store: runs, their outputs and logs, and what is learned.", DIR,
    env=ENV_STORE, default=DEFAULT_STORE,
)  # fmt: skip
REDIS_URL = Flag("redis-url", "Redis to use.", env="REDIS_URL", default=DEFAULT_REDIS_URL)
PREFIX = Flag("prefix", "Redis key prefix.")
TOKEN = Flag(
    "token", "The bearer token of the service's HTTP API (prefer SIMRUN_TOKEN: an option "
    "shows in the process list).", env=ENV_TOKEN,
)  # fmt: skip
JOB_KEY = Flag(
    "job-key", "The key that signs jobs and reports (environment only).", env=ENV_JOB_KEY,
    secret=True,
)  # fmt: skip
JOB_KEY_FILE = Flag(
    "job-key-file", "File of the key that signs jobs and reports, shared by the service and "
    "its workers [default: SIMRUN_JOB_KEY, else STORE/.simrun-job.key, made when missing].",
    click.Path(dir_okay=False, path_type=Path), env=ENV_JOB_KEY_FILE,
)  # fmt: skip
PLUGINS = Flag(
    "plugins", "Also load this task type (repeatable), besides the installed ones.",
    multiple=True, metavar="MODULE:ATTR",
)  # fmt: skip
GRACE_S = Flag(
    "grace-s", "After a stop (SIGTERM, Ctrl-C), seconds running units get to finish before "
    "they are handed back.", click.FloatRange(min=0),
)  # fmt: skip
PROBE = Flag(
    "probe", "Send a small probe of a task whose memory is not learned yet ahead of its "
    "other units, which then get the learned memory (--no-probe: every unit at once, with "
    "the plugin's hint).",
)  # fmt: skip
REDIS_WAIT_S = Flag(
    "redis-wait-s", "Seconds to wait for Redis at start while it is not reachable (refused, "
    "timed out, a name that does not resolve yet) [default: for ever; 0: fail at once]. Bad "
    "credentials or a bad URL fail at once whatever this says.", click.FloatRange(min=0),
)  # fmt: skip
REDIS_TIMEOUT_S = Flag(
    "redis-timeout-s", "Seconds one Redis call or connection attempt may take before it "
    "fails: how soon a Redis that stopped answering without closing its connections is "
    "noticed.", click.FloatRange(min=0.1),
)  # fmt: skip


def scratch_dir_flag(default_text: str, type: Any = DIR) -> Flag:
    """``--scratch-dir`` (``SIMRUN_SCRATCH_DIR``); ``default_text`` says its default."""
    return Flag(
        "scratch-dir", "The local directory of the tasks' scratch and staged inputs, on the "
        "workers' own disk (an emptyDir, a local volume), never the shared store; each "
        f"worker keeps its own <worker id>/ in it [default: {default_text}].", type,
        env="SIMRUN_SCRATCH_DIR",
    )  # fmt: skip


LIMITS = Group(
    max_retries=Flag(
        "max-retries",
        "Retries of a unit that raised or timed out before it is failed.",
        click.IntRange(0, 100),
    ),
    max_kills=Flag(
        "max-kills",
        "Retries, each with more memory, of a unit killed for memory.",
        click.IntRange(0, 100),
    ),
)


_COUNT = click.IntRange(min=1)


def _intake(name: str, help: str, type: Any = _COUNT) -> tuple[str, Flag]:
    return name, Flag(name.replace("_", "-"), help, type, env=f"SIMRUN_{name.upper()}")


#: What a client may ask of the service (`simrun.core.intake.InputLimits`).
INTAKE = Group([
    _intake("max_request_bytes", "Largest body of POST /runs: the workflow and its sources, "
            "base64 (4/3 of the files)."),
    _intake("max_workflow_bytes", "Largest workflow document (it is kept whole in the store)."),
    _intake("max_file_bytes", "Largest source file of a submission (decoded)."),
    _intake("max_files", "Most source files of a submission (each file of a directory counts)."),
    _intake("max_depth", "Most directories above a file of an uploaded directory source."),
    _intake("max_tasks", "Most tasks of a run."),
    _intake("max_units_per_task", "Most units one task may count; past it the task fails at "
            "once."),
    _intake("max_units_per_run", "Most units of all the tasks of a run."),
    _intake("count_timeout_s", "Seconds count_units may take before its task fails.", POSITIVE),
])  # fmt: skip


@functools.cache
def flags(cls: type) -> dict[str, Flag | Group]:
    """The `Flag` or `Group` of each field of the dataclass ``cls`` that has one, in order."""
    found: dict[str, Flag | Group] = {}
    for name, hint in get_type_hints(cls, include_extras=True).items():
        for mark in getattr(hint, "__metadata__", ()):
            if isinstance(mark, Flag | Group):
                found[name] = mark
    return found


def default(cls: type, name: str) -> Any:
    """The command line's default of setting ``name`` of ``cls``."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    if field.default is not dataclasses.MISSING:
        return field.default
    return getattr(flags(cls)[name], "default", None)


def options_of(cls: type) -> list[tuple[str, Flag, Any]]:
    """(parameter, flag, default) of each option of the settings ``cls``, in order; those of
    a `Group` stand for its field."""
    found = []
    for name, mark in flags(cls).items():
        value = default(cls, name)
        if isinstance(mark, Group):
            found += [(sub, flag, getattr(value, sub)) for sub, flag in mark.items()]
        else:
            found.append((name, mark, value))
    return found


def option(cls: type, name: str) -> Callable[[F], F]:
    """The click option of setting ``name`` of ``cls``."""
    return next(flag.option(dest, value) for dest, flag, value in options_of(cls) if dest == name)


def click_options(cls: type, into: str = "settings") -> Callable[[F], F]:
    """A decorator that gives a click command the options of the settings ``cls``, and the
    command one parameter ``into``: the settings made from them (a usage error when ``cls``
    refuses them)."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {}
            for name, mark in flags(cls).items():
                if isinstance(mark, Group):
                    parts = {sub: kwargs.pop(sub) for sub in mark}
                    values[name] = dataclasses.replace(default(cls, name), **parts)
                else:
                    values[name] = kwargs.pop(name)
            try:
                settings = cls(**values)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
            return command(*args, **{into: settings}, **kwargs)

        decorated: Callable[..., Any] = wrapper
        for dest, flag, value in reversed(options_of(cls)):
            decorated = flag.option(dest, value)(decorated)
        return decorated  # type: ignore[return-value]

    return decorate


def redact_url(url: str) -> str:
    """``url`` without its password, for messages (``redis://user:***@host:6379/0``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return parts._replace(netloc=user + netloc).geturl()
