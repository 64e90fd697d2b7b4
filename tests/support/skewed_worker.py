"""``python -m tests.support.skewed_worker SKEW_S ARGS...``: ``simrun worker ARGS`` in a
process whose wall clock (`time.time`) is ``SKEW_S`` seconds off (negative: behind), as on
a machine with a wrong clock. `time.time` is replaced before simrun or arq is imported, so
their ``from time import time`` takes the skewed one too; the monotonic clock is left."""

from __future__ import annotations

import sys
import time


def main() -> None:
    skew_s = float(sys.argv.pop(1))
    real = time.time

    def skewed() -> float:
        return real() + skew_s

    time.time = skewed
    from simrun.cli.group import cli

    cli(prog_name="simrun")


if __name__ == "__main__":
    main()
