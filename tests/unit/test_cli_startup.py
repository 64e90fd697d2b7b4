"""The command line starts fast: ``simrun --help`` imports none of the big commands, nor the
HTTP client, rich, the service or the workflow's models (what it imports is measured in
benchmarks/latency.py; here, which modules are imported)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from simrun.cli.group import LAZY_COMMANDS, cli, short_help

#: Modules `simrun --help` must not import: each costs tens of milliseconds at start-up.
HEAVY = (
    "httpx",
    "rich",
    "fastapi",
    "uvicorn",
    "arq",
    "redis",
    "aiosqlite",
    "prometheus_client",
    "numpy",
    "simrun.workflow",
    "simrun.client",
    "simrun.service",
    "simrun.cli.remote",
    "simrun.cli.run",
    "simrun.api",
)


def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(out.split())


def test_help_imports_no_heavy_module() -> None:
    """`simrun --help` lists every command with its short help without importing the
    commands' modules, the HTTP client, rich, the service or the workflow's models."""
    loaded = _imported_after(
        "from simrun.cli import cli\ntry:\n    cli(['--help'])\nexcept SystemExit:\n    pass"
    )
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []


def test_status_help_imports_neither_the_client_nor_the_service() -> None:
    """`simrun status --help` imports its command's module only: not httpx, the service or
    the embedded session."""
    loaded = _imported_after(
        "from simrun.cli import cli\n"
        "try:\n    cli(['status', '--help'])\nexcept SystemExit:\n    pass"
    )
    for module in ("httpx", "simrun.service", "simrun.local.session", "arq", "uvicorn"):
        assert module not in loaded


@pytest.mark.parametrize("name", sorted(LAZY_COMMANDS))
def test_the_short_help_listed_is_the_commands_own(name: str) -> None:
    """The short help `--help` lists for a lazy command (read from its module's source so
    that the list imports nothing) is the first sentence of the command's own help."""
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert short_help(name, 10**6) == command.get_short_help_str(10**6)
