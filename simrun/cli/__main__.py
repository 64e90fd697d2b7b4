"""``python -m simrun.cli ARGS``: the same as ``simrun ARGS`` (how embedded mode and the
tests start a worker container with the interpreter they run on)."""

from simrun.cli.group import cli

cli(prog_name="simrun")
