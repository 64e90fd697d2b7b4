"""The ``simrun`` command: the click group and its small commands. A user's mistake is
printed as its message alone; ``--debug`` adds the traceback."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from simrun.workflow import SettingOverride

from simrun import __version__
from simrun.app.types import load_types_from_here
from simrun.cli.common import EXIT_INTERRUPTED, exit_code_of, is_user_error
from simrun.cli.options import SET

if TYPE_CHECKING:  # the command line imports plugins only when a command needs them
    from simrun.plugins import TaskType


#: Commands in modules of their own (``simrun.cli.<module>:<command>``), imported only when
#: used: ``simrun --help`` and ``simrun types`` do not wait for the service, the HTTP client
#: or rich. ``--help`` lists them with the short help of their docstring (`short_help`).
LAZY_COMMANDS: dict[str, str] = {
    "run": "run:run",
    "submit": "remote:submit",
    "status": "remote:status",
    "replay": "remote:replay",
    "cancel": "remote:cancel",
    "logs": "logs:logs",
    "resources": "remote:resources",
    "scale": "scale:scale",
    "workers": "workers:workers",
    "worker": "worker:worker",
    "service": "service:service",
}


def short_help(name: str, limit: int) -> str:
    """The short help of the lazy command ``name``, from its docstring read in the source of
    its module: listing the commands imports none of them."""
    module, _, attr = LAZY_COMMANDS[name].partition(":")
    source = (Path(__file__).parent / f"{module}.py").read_text(encoding="utf-8")
    found = re.search(rf'^def {attr}\(.*?"""(.*?)"""', source, re.DOTALL | re.MULTILINE)
    doc = inspect.cleandoc(found.group(1)) if found is not None else ""
    return click.Command(name, help=doc).get_short_help_str(limit)


class SimrunGroup(click.Group):
    """The group that loads its big commands when they are used, and turns errors into a
    few lines (a traceback with ``--debug``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of ``--help``: the short help of the lazy commands is written here, so
        that listing them imports none of them."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        rows = []
        for name in names:
            if name in LAZY_COMMANDS:
                rows.append((name, short_help(name, limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = LAZY_COMMANDS.get(cmd_name)
        if lazy is None:
            return super().get_command(ctx, cmd_name)
        module, _, attr = lazy.partition(":")
        command = getattr(importlib.import_module(f"simrun.cli.{module}"), attr)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            click.secho("interrupted", fg="yellow", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if is_user_error(exc):
                if debug:
                    traceback.print_exc()
                click.secho(f"error: {exc}", fg="red", err=True)
                sys.exit(exit_code_of(exc))
            if debug:
                raise
            click.secho(
                f"error: {type(exc).__name__}: {exc}\n(this is a bug of simrun; run the command "
                "again with --debug for the traceback, and report it)",
                fg="red",
                err=True,
            )
            sys.exit(1)


@click.group(cls=SimrunGroup)
@click.version_option(__version__, prog_name="simrun")
@click.option("--debug", is_flag=True, help="Show tracebacks of errors.")
def cli(debug: bool) -> None:
    """Run simulation campaigns: workflows of tasks split into units, with learned memory.

    Start with `simrun run examples/heat.yaml`: everything runs on this machine.
    """


@cli.command()
@click.argument("workflow", type=click.Path(path_type=Path, dir_okay=False))
@SET
def validate(workflow: Path, overrides: tuple[SettingOverride, ...]) -> None:
    """Check WORKFLOW against the installed task types and print its tasks in order.

    A command whose program is not found here (on PATH, or beside simrun) is an error,
    unless its type runs in an image of its own. The same checks as `simrun run` makes
    (`simrun.app.prepare.prepare`), the types' ``plan`` included."""
    from simrun.app.prepare import prepare

    types = load_types_from_here()
    prepared = prepare(workflow, types, overrides=overrides, programs=True)
    doc, settings = prepared.doc, prepared.settings
    count = len(doc.tasks)
    click.echo(
        f"{workflow}: ok — model {doc.model or '(none)'!r}, {count} task{'' if count == 1 else 's'}"
    )
    for name in doc.order():
        spec = doc.task(name)
        kind = "splittable" if types[spec.type].splittable else "command"
        click.echo(f"  {name:<20} {spec.type:<12} {kind:<10} {json.dumps(settings[name])}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def types(as_json: bool) -> None:
    """List the installed task types: kind, ports, hint, cost setting, cores, image,
    checkpoints and each setting with its type and default."""
    found = load_types_from_here()
    if as_json:
        from simrun.core.views import type_info

        click.echo(json.dumps([type_info(t) for t in found.values()], indent=2))
        return
    for t in found.values():
        for line in type_lines(t):
            click.echo(line)


def type_lines(t: TaskType) -> list[str]:
    """What `simrun types` prints of a type, one line each."""
    kind = "splittable" if t.splittable else "command"
    hint = t.hint
    traits = [
        f"cost setting: {t.cost_setting}" if t.cost_setting else "",
        "uses the cores of its pod" if t.uses_cores else "",
        f"image: {t.image}" if t.image else "",
        "checkpoints" if t.checkpoints else "",
        _unit_outputs_trait(t),
    ]
    lines = [
        f"{t.name:<12} {kind:<10} {t.description}",
        f"{'':<12} in: {', '.join(t.inputs) or '-'}  out: {', '.join(t.outputs)}  "
        f"hint: {hint.memory_base_gb:g} GiB base, {hint.memory_per_worker_gb:g} GiB/process, "
        f"{hint.gpus} GPU",
    ]
    if any(traits):
        lines.append(f"{'':<12} {'; '.join(x for x in traits if x)}")
    schema = t.settings.model_json_schema()
    props = schema.get("properties", {})
    for name, info in t.settings.model_fields.items():
        default = "required" if info.is_required() else f"= {info.get_default()!r}"
        kind = _schema_type(props.get(info.alias or name, {}), schema.get("$defs", {}))
        lines.append(f"{'':<14}{name}: {kind} {default}")
    return lines


def _unit_outputs_trait(t: TaskType) -> str:
    """``units reused one by one (...)`` of a type declaring `UnitOutputs`, else empty."""
    from simrun.plugins import unit_outputs

    declared = unit_outputs(t)
    if declared is None:
        return ""
    counted = ", ".join(declared.count_settings) or "none"
    return f"units reused one by one ({', '.join(declared.files)}; count settings: {counted})"


_JSON_TYPES = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}
_BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _schema_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A setting's type as a user reads it, from its JSON schema: ``int``, ``list[float > 0]``,
    ``one of 'a', 'b'``, ``int | null``."""
    if "$ref" in prop:
        prop = defs.get(str(prop["$ref"]).rsplit("/", 1)[-1], {})
    if "enum" in prop:
        return "one of " + ", ".join(repr(v) for v in prop["enum"])
    if "const" in prop:
        return repr(prop["const"])
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " | ".join(_schema_type(p, defs) for p in prop[key])
    kind = prop.get("type")
    if kind == "array":
        return f"list[{_schema_type(prop.get('items', {}), defs)}]"
    if kind == "object":
        return "mapping"
    name = _JSON_TYPES.get(str(kind), str(kind or "any"))
    bounds = [f"{op} {prop[k]:g}" for k, op in _BOUNDS.items() if k in prop]
    return " ".join([name, *bounds])


def main() -> None:
    """Entry point of the ``simrun`` console script."""
    cli()
