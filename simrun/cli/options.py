"""The options several commands share, each declared once; those of a setting take their
help and environment variable from its `simrun.config.Flag`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from simrun import config
from simrun.config import DEFAULT_STORE, DEFAULT_URL, DIR, ENV_STORE, ENV_URL, POSITIVE

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds between two progress lines when the output is not a terminal.
DEFAULT_EVERY_S = 10.0

EVERY_S = click.option(
    "--every-s", type=click.FloatRange(min=0.1), default=DEFAULT_EVERY_S, show_default=True,
    help="Seconds between progress lines when the output is not a terminal.",
)  # fmt: skip
PLUGINS = config.PLUGINS.option("plugins", ())
TOKEN = config.TOKEN.option("token", None)
#: The store ``SIMRUN_STORE`` names, for the commands of `read_store_option`.
STORE_HINT = click.option(
    "--store-hint", "store_hint", type=DIR, envvar=ENV_STORE, default=DEFAULT_STORE, hidden=True
)
URL = click.option(
    "--url", envvar=ENV_URL, show_envvar=True, default=DEFAULT_URL, show_default=True,
    help="The simrun service.",
)  # fmt: skip


def _overrides(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    """The ``--set`` values as `SettingOverride`s, in their order."""
    from simrun.workflow import parse_override

    try:
        return tuple(parse_override(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


SET = click.option(
    "--set", "overrides", multiple=True, metavar="TASK.SETTING=VALUE", callback=_overrides,
    help="Set a task's setting, over the workflow file: TASK.SETTING=VALUE, the value read as "
    "YAML (200 is a number, '\"200\"' a string, [1, 2] a list); repeatable. Checked by the "
    "task type's settings model like the file.",
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


def read_store_option(help_text: str) -> Callable[[F], F]:
    """``--store DIR`` of a command that otherwise asks a service, without a default or an
    environment variable."""
    return click.option("--store", type=DIR, default=None, help=help_text)


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


def worker_memory_option(help_text: str) -> Callable[[F], F]:
    """``--worker-memory-gb``: the memory of each worker container, GiB."""
    return click.option("--worker-memory-gb", type=POSITIVE, default=None, help=help_text)


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
