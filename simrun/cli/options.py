"""The options several commands share, each declared once with one default; those with an
environment variable name it with click's ``envvar=`` (read once, at the edge).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import click

from simrun.config import (
    DEFAULT_REDIS_URL,
    DEFAULT_STORE,
    DEFAULT_URL,
    ENV_ENGINE,
    ENV_REDIS_URL,
    ENV_SCRATCH_DIR,
    ENV_STORE,
    ENV_TOKEN,
    ENV_URL,
    INTAKE_ENV,
)
from simrun.core.intake import InputLimits
from simrun.core.outage import REDIS_TIMEOUT_S as _REDIS_TIMEOUT_S
from simrun.core.states import Limits
from simrun.core.timing import DEFAULT_GRACE_S, HEARTBEAT_S, HEARTBEAT_TTL_S

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds between two progress lines when the output is not a terminal.
DEFAULT_EVERY_S = 10.0

POSITIVE = click.FloatRange(min=0, min_open=True)
STORE_PATH = click.Path(file_okay=False, path_type=Path)

HELP = {
    "every_s": "Seconds between progress lines when the output is not a terminal.",
    "grace_s": "After a stop (SIGTERM, Ctrl-C), seconds running units get to finish before "
    "they are handed back.",
    "plugins": "Also load this task type (repeatable), besides the installed ones.",
    "store": "The run store: runs, their outputs and logs, and what is learned.",
    "url": "The simrun service.",
    "token": "The bearer token of the service's HTTP API (prefer SIMRUN_TOKEN: an option "
    "shows in the process list).",
    "redis_url": "Redis to use.",
    "embedded_redis_url": "Redis to use, with a key prefix of the store [default: a private "
    "redis-server for the session].",
    "prefix": "Redis key prefix.",
    "max_retries": "Retries of a unit that raised or timed out before it is failed.",
    "max_kills": "Retries, each with more memory, of a unit killed for memory.",
    "heartbeat_s": "Seconds between a worker's heartbeats.",
    "worker_ttl": "Seconds a heartbeat lives; longer than --heartbeat-s. The service gives the "
    "jobs of a worker whose heartbeat expired to others. [default: 4 x --heartbeat-s]",
    "probe": "Send a small probe of a task whose memory is not learned yet ahead of its "
    "other units, which then get the learned memory (--no-probe: every unit at once, with "
    "the plugin's hint).",
    "service_ttl": "Seconds a worker's heartbeat lives; at least the workers' "
    "--heartbeat-ttl-s. A job that no live worker lists for longer is dispatched again.",
}

EVERY_S = click.option(
    "--every-s", type=click.FloatRange(min=0.1), default=DEFAULT_EVERY_S, show_default=True,
    help=HELP["every_s"],
)  # fmt: skip
GRACE_S = click.option(
    "--grace-s", type=click.FloatRange(min=0), default=DEFAULT_GRACE_S, show_default=True,
    help=HELP["grace_s"],
)  # fmt: skip
PLUGINS = click.option("--plugins", multiple=True, metavar="MODULE:ATTR", help=HELP["plugins"])
STORE = click.option(
    "--store", type=STORE_PATH, envvar=ENV_STORE, show_envvar=True, default=DEFAULT_STORE,
    show_default=True, help=HELP["store"],
)  # fmt: skip
#: The store ``SIMRUN_STORE`` names, for the commands of `read_store_option`.
STORE_HINT = click.option(
    "--store-hint", "store_hint", type=STORE_PATH, envvar=ENV_STORE, default=DEFAULT_STORE,
    hidden=True,
)  # fmt: skip
URL = click.option(
    "--url", envvar=ENV_URL, show_envvar=True, default=DEFAULT_URL, show_default=True,
    help=HELP["url"],
)  # fmt: skip
TOKEN = click.option("--token", envvar=ENV_TOKEN, show_envvar=True, help=HELP["token"])
REDIS_URL = click.option(
    "--redis-url", envvar=ENV_REDIS_URL, show_envvar=True, default=DEFAULT_REDIS_URL,
    show_default=True, help=HELP["redis_url"],
)  # fmt: skip
EMBEDDED_REDIS_URL = click.option(
    "--redis-url", envvar=ENV_REDIS_URL, show_envvar=True, help=HELP["embedded_redis_url"]
)

ENGINE = click.option(
    "--engine", envvar=ENV_ENGINE, show_envvar=True, default=None, metavar="ENGINE",
    help="Container engine (docker, podman or a path) that runs the commands of tasks with "
    "an image inside it [default: docker, else podman, on PATH].",
)  # fmt: skip

PROBE = click.option("--probe/--no-probe", default=True, show_default=True, help=HELP["probe"])


def _overrides(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    """The ``--set`` values as `SettingOverride`s, in their order."""
    from simrun.workflow import parse_override

    try:
        return tuple(parse_override(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


SET_HELP = (
    "Set a task's setting, over the workflow file: TASK.SETTING=VALUE, the value read as "
    "YAML (200 is a number, '\"200\"' a string, [1, 2] a list); repeatable. Checked by the "
    "task type's settings model like the file."
)
SET = click.option(
    "--set", "overrides", multiple=True, metavar="TASK.SETTING=VALUE", callback=_overrides,
    help=SET_HELP,
)  # fmt: skip


NO_REUSE = click.option(
    "--reuse/--no-reuse", default=True, show_default=True,
    help="Reuse the outputs of an earlier run of the store for a task whose type, version, "
    "settings and inputs did not change (--no-reuse: every task runs).",
)  # fmt: skip
RERUN = click.option(
    "--rerun", multiple=True, metavar="TASK",
    help="Run TASK (and every task that depends on it) even when earlier work could be "
    "reused; repeatable.",
)  # fmt: skip


class _Decorator(Protocol):
    def __call__(self, f: F, /) -> F: ...


def _prefix_option() -> _Decorator:
    # `simrun.queues` imports arq and redis: only the commands with --prefix pay for it
    from simrun.queues.keys import DEFAULT_PREFIX

    return click.option("--prefix", default=DEFAULT_PREFIX, show_default=True, help=HELP["prefix"])


def __getattr__(name: str) -> _Decorator:
    """``PREFIX``, made when a command module imports it (see `_prefix_option`)."""
    if name == "PREFIX":
        return _prefix_option()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


HEARTBEAT_INTERVAL_S = click.option(
    "--heartbeat-s", type=click.FloatRange(min=0.05), default=HEARTBEAT_S, show_default=True,
    help=HELP["heartbeat_s"],
)  # fmt: skip
WORKER_HEARTBEAT_TTL_S = click.option(
    "--heartbeat-ttl-s", type=POSITIVE, default=None, help=HELP["worker_ttl"]
)
SERVICE_HEARTBEAT_TTL_S = click.option(
    "--heartbeat-ttl-s", type=POSITIVE, default=HEARTBEAT_TTL_S, show_default=True,
    help=HELP["service_ttl"],
)  # fmt: skip

_LIMITS = Limits()
_MAX_RETRIES = click.option(
    "--max-retries", type=click.IntRange(0, 100), default=_LIMITS.max_retries, show_default=True,
    help=HELP["max_retries"],
)  # fmt: skip
_MAX_KILLS = click.option(
    "--max-kills", type=click.IntRange(0, 100), default=_LIMITS.max_kills, show_default=True,
    help=HELP["max_kills"],
)  # fmt: skip


def limits_options(f: F) -> F:
    """``--max-retries`` and ``--max-kills``: the `Limits` of a unit."""
    return _MAX_RETRIES(_MAX_KILLS(f))


def read_store_option(help_text: str) -> Callable[[F], F]:
    """``--store DIR`` of a command that otherwise asks a service, without a default or an
    environment variable."""
    return click.option("--store", type=STORE_PATH, default=None, help=help_text)


def local_store(store: Path | None, store_hint: Path) -> Path | None:
    """The store a command that otherwise asks a service reads: ``--store``; else, when no
    service was named, ``store_hint`` if it is a store; else None (ask the service)."""
    if store is not None:
        return store
    ctx = click.get_current_context(silent=True)
    named = ctx is not None and ctx.get_parameter_source("url") in (
        click.core.ParameterSource.COMMANDLINE,
        click.core.ParameterSource.ENVIRONMENT,
    )
    from simrun.core.layout import StoreLayout

    return store_hint if not named and StoreLayout(store_hint).is_store() else None


def scratch_dir_option(default_text: str) -> Callable[[F], F]:
    """``--scratch-dir`` (``SIMRUN_SCRATCH_DIR``); ``default_text`` says its default."""
    return click.option(
        "--scratch-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=ENV_SCRATCH_DIR,
        show_envvar=True,
        default=None,
        help="The local directory of the tasks' scratch and staged inputs, on the workers' "
        "own disk (an emptyDir, a local volume), never the shared store; each worker keeps "
        f"its own <worker id>/ in it [default: {default_text}].",
    )


def worker_memory_option(help_text: str, *, old_name: bool = True) -> Callable[[F], F]:
    """``--worker-memory-gb``: the memory of each worker container, GiB; with ``old_name``
    its former spelling ``--memory-gb`` still works (hidden) with a notice."""

    def decorate(f: F) -> F:
        if not old_name:
            return click.option("--worker-memory-gb", type=POSITIVE, default=None, help=help_text)(
                f
            )

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            old = kwargs.pop("old_memory_gb")
            if old is not None:
                if kwargs["worker_memory_gb"] is not None:
                    raise click.UsageError(
                        "give --worker-memory-gb only (--memory-gb is its old name)"
                    )
                click.echo(
                    "note: --memory-gb here is the old name of --worker-memory-gb (memory of "
                    "each worker container); use that: --memory-gb will mean memory per "
                    "process, as on `simrun replay`",
                    err=True,
                )
                kwargs["worker_memory_gb"] = old
            return f(*args, **kwargs)

        options = [
            click.option("--worker-memory-gb", type=POSITIVE, default=None, help=help_text),
            click.option("--memory-gb", "old_memory_gb", type=POSITIVE, default=None, hidden=True),
        ]
        decorated: Any = wrapper
        for option in reversed(options):
            decorated = option(decorated)
        return cast("F", decorated)

    return decorate


def container_processes_option(help_text: str) -> Callable[[F], F]:
    """``--processes``: the worker processes of a container."""
    return click.option("--processes", type=click.IntRange(min=1), default=None, help=help_text)


def url_args(url: str) -> list[str]:
    """``--url URL`` when the command line gave it, for the commands it prints."""
    ctx = click.get_current_context(silent=True)
    given = (
        ctx is not None
        and ctx.get_parameter_source("url") == click.core.ParameterSource.COMMANDLINE
    )
    return ["--url", url] if given else []


_INTAKE = InputLimits()
_INTAKE_HELP = {
    "max_request_bytes": "Largest body of POST /runs: the workflow and its sources, base64 "
    "(4/3 of the files).",
    "max_workflow_bytes": "Largest workflow document (it is kept whole in the store).",
    "max_file_bytes": "Largest source file of a submission (decoded).",
    "max_files": "Most source files of a submission (each file of a directory counts).",
    "max_depth": "Most directories above a file of an uploaded directory source.",
    "max_tasks": "Most tasks of a run.",
    "max_units_per_task": "Most units one task may count; past it the task fails at once.",
    "max_units_per_run": "Most units of all the tasks of a run.",
    "count_timeout_s": "Seconds count_units may take before its task fails.",
}


def _intake_option(name: str) -> Callable[[F], F]:
    default = getattr(_INTAKE, name)
    kind = POSITIVE if isinstance(default, float) else click.IntRange(min=1)
    return click.option(
        "--" + name.replace("_", "-"), type=kind, default=default, show_default=True,
        envvar=INTAKE_ENV[name], show_envvar=True, help=_INTAKE_HELP[name],
    )  # fmt: skip


def intake_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The `InputLimits` options (each with its variable of `INTAKE_ENV`), given to the
    command as one parameter ``intake``."""
    names = [f.name for f in fields(InputLimits)]

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        return f(*args, intake=InputLimits(**values), **kwargs)

    decorated: Callable[..., Any] = wrapper
    for name in reversed(names):
        decorated = _intake_option(name)(decorated)
    return decorated


REDIS_WAIT_HELP = (
    "Seconds to wait for Redis at start while it is not reachable (refused, timed out, a "
    "name that does not resolve yet) [default: for ever; 0: fail at once]. Bad credentials "
    "or a bad URL fail at once whatever this says."
)
REDIS_TIMEOUT_HELP = (
    "Seconds one Redis call or connection attempt may take before it fails: how soon a "
    "Redis that stopped answering without closing its connections is noticed."
)
REDIS_WAIT_S = click.option(
    "--redis-wait-s", type=click.FloatRange(min=0), default=None, help=REDIS_WAIT_HELP
)
REDIS_TIMEOUT_S = click.option(
    "--redis-timeout-s", type=click.FloatRange(min=0.1), default=_REDIS_TIMEOUT_S,
    show_default=True, help=REDIS_TIMEOUT_HELP,
)  # fmt: skip
