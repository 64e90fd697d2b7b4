"""The ``simrun`` command line (the click group is `simrun.cli.group`)."""

from simrun.cli.group import cli as cli
from simrun.cli.group import main as main
