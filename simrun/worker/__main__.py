"""``python -m simrun.worker``: the same as ``simrun worker``."""

from simrun.worker.cli import worker

worker(prog_name="simrun worker")
