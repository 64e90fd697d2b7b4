"""``python -m simrun.worker``: the same as ``simrun worker``."""

from simrun.cli.worker import worker

worker(prog_name="simrun worker")
