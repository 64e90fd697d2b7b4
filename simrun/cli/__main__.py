"""``python -m simrun.cli ARGS``: the same as ``simrun ARGS``."""

from simrun.cli.group import cli

cli(prog_name="simrun")
