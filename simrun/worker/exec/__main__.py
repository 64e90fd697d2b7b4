"""``python -m simrun.worker.exec``: the same as ``simrun-exec``."""

import sys

from simrun.worker.exec.main import exec_main

sys.exit(exec_main())
