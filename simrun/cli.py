"""The ``simrun`` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from simrun import __version__
from simrun.config import load_config
from simrun.plugins import PluginError, TaskType, load_task_types
from simrun.workflow import WorkflowError, check_workflow, load_workflow, source_problems

__all__ = ["main"]


def _fail(message: str) -> None:
    """Print a user's mistake in a few lines and exit non-zero, without a traceback."""
    click.secho(message, fg="red", err=True)
    sys.exit(2)


def _types() -> dict[str, TaskType]:
    try:
        return load_task_types()
    except (PluginError, ValueError) as exc:
        _fail(str(exc))
        raise AssertionError("unreachable") from exc


@click.group()
@click.version_option(__version__, prog_name="simrun")
def cli() -> None:
    """Run simulation campaigns: workflows of tasks split into units, with learned memory."""


@cli.command()
@click.argument("workflow", type=click.Path(path_type=Path, dir_okay=False))
def validate(workflow: Path) -> None:
    """Check WORKFLOW against the installed task types and print its tasks in order."""
    types = _types()
    try:
        doc = load_workflow(workflow)
        text = workflow.read_text(encoding="utf-8")
        settings = check_workflow(doc, types, str(workflow), text)
        missing = source_problems(doc, workflow.parent)
        if missing:
            raise WorkflowError(missing, str(workflow))
    except WorkflowError as exc:
        _fail(str(exc))
        return
    click.echo(f"{workflow}: ok — model {doc.model or '(none)'!r}, {len(doc.tasks)} tasks")
    for name in doc.order():
        spec = doc.task(name)
        kind = "splittable" if types[spec.type].splittable else "command"
        click.echo(f"  {name:<20} {spec.type:<12} {kind:<10} {json.dumps(settings[name])}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def types(as_json: bool) -> None:
    """List the installed task types."""
    found = _types()
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


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run store directory [default: SIMRUN_STORE or ./simrun-store].",
)
@click.option("--redis-url", default=None, help="Redis [default: REDIS_URL or local].")
@click.option("--prefix", default="simrun", show_default=True, help="Redis key prefix.")
@click.option(
    "--plugins",
    multiple=True,
    help="Extra task types as module:OBJECT, besides the installed entry points.",
)
@click.option(
    "--max-retries",
    default=2,
    show_default=True,
    type=click.IntRange(0, 100),
    help="Retries of a unit that raised or timed out before it is failed.",
)
@click.option(
    "--max-kills",
    default=4,
    show_default=True,
    type=click.IntRange(0, 100),
    help="Retries, each with more memory, of a unit killed for memory.",
)
def service(
    host: str,
    port: int,
    store: Path | None,
    redis_url: str | None,
    prefix: str,
    plugins: tuple[str, ...],
    max_retries: int,
    max_kills: int,
) -> None:
    """Run the service: the controller loop and the HTTP API."""
    # Imported here so that commands which need no service start without loading it.
    import asyncio
    import logging

    from simrun.runstate import Limits
    from simrun.service.controller import ControllerSettings, load_types
    from simrun.service.main import serve

    config = load_config()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        types = load_types(plugins)
    except (PluginError, ValueError) as exc:
        _fail(str(exc))
        return
    settings = ControllerSettings(
        store=(store or config.store).resolve(),
        redis_url=redis_url or config.redis_url_or_default,
        prefix=prefix,
        limits=Limits(max_retries=max_retries, max_kills=max_kills),
    )
    asyncio.run(serve(settings, types, host=host, port=port, token=config.token))


def _add_worker_command() -> None:
    from simrun.worker.cli import worker

    cli.add_command(worker)


_add_worker_command()


def main() -> None:
    """Entry point of the ``simrun`` console script."""
    cli()
