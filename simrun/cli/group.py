"""The ``simrun`` command: the click group and its small commands.

``run`` (embedded mode) is `simrun.cli.run`; the commands that work with a service are
`simrun.cli.remote`; ``worker`` is `simrun.cli.worker` and ``service``
`simrun.cli.service`. A user's mistake (a bad workflow, a
plugin that does not load, a service that cannot be reached) is printed as its message
alone; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from simrun import __version__
from simrun.cli.common import EXIT_INTERRUPTED, USER_ERRORS, exit_code_of, load_types_from_here
from simrun.workflow import WorkflowError, check_workflow, load_workflow, source_problems

__all__ = ["cli", "main"]


#: Commands in modules of their own, imported when they are used (``simrun types`` should
#: not wait for the service's imports): name -> "module:attribute".
LAZY_COMMANDS = {
    "run": "simrun.cli.run:run",
    "submit": "simrun.cli.remote:submit",
    "status": "simrun.cli.remote:status",
    "replay": "simrun.cli.remote:replay",
    "cancel": "simrun.cli.remote:cancel",
    "resources": "simrun.cli.remote:resources",
    "scale": "simrun.cli.scale:scale",
    "worker": "simrun.cli.worker:worker",
    "service": "simrun.cli.service:service",
}


class SimrunGroup(click.Group):
    """The group that loads its big commands when they are used, and turns errors into a
    few lines (a traceback with ``--debug``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        ref = LAZY_COMMANDS.get(cmd_name)
        if ref is None:
            return super().get_command(ctx, cmd_name)
        module, _, attr = ref.partition(":")
        command = getattr(importlib.import_module(module), attr)
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
        except USER_ERRORS as exc:
            if debug:
                traceback.print_exc()
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(exit_code_of(exc))
        except Exception as exc:
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
def validate(workflow: Path) -> None:
    """Check WORKFLOW against the installed task types and print its tasks in order."""
    types = load_types_from_here()
    doc = load_workflow(workflow)
    text = workflow.read_text(encoding="utf-8")
    settings = check_workflow(doc, types, str(workflow), text)
    missing = source_problems(doc, workflow.parent)
    if missing:
        raise WorkflowError(missing, str(workflow))
    click.echo(f"{workflow}: ok — model {doc.model or '(none)'!r}, {len(doc.tasks)} tasks")
    for name in doc.order():
        spec = doc.task(name)
        kind = "splittable" if types[spec.type].splittable else "command"
        click.echo(f"  {name:<20} {spec.type:<12} {kind:<10} {json.dumps(settings[name])}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def types(as_json: bool) -> None:
    """List the installed task types."""
    found = load_types_from_here()
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "name": t.name,
                        "description": t.description,
                        "inputs": list(t.inputs),
                        "outputs": list(t.outputs),
                        "splittable": t.splittable,
                        "hint": vars(t.hint),
                        "cost_setting": t.cost_setting,
                        "settings_schema": t.settings.model_json_schema(),
                    }
                    for t in found.values()
                ],
                indent=2,
            )
        )
        return
    for t in found.values():
        kind = "splittable" if t.splittable else "command"
        click.echo(f"{t.name:<12} {kind:<10} {t.description}")
        ports = f"in: {', '.join(t.inputs) or '-'}  out: {', '.join(t.outputs)}"
        hint = t.hint
        click.echo(
            f"{'':<12} {ports}  hint: {hint.memory_base_gb:g} GiB base, "
            f"{hint.memory_per_worker_gb:g} GiB/process, {hint.gpus} GPU"
        )
        for field, info in t.settings.model_fields.items():
            default = "required" if info.is_required() else f"= {info.get_default()!r}"
            click.echo(f"{'':<14}{field} {default}")


def main() -> None:
    """Entry point of the ``simrun`` console script."""
    cli()
