"""``python -m simrun.local.guard``: ends the processes of an embedded session that died
without stopping them. It reads their pids and ``rm PATH`` lines from its standard input;
``done`` ends it quietly, the end of the input makes it SIGTERM them and remove the paths."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable

DONE = "done"
REMOVE = "rm "
#: How long the guard waits for the processes to end before it removes the directories.
WAIT_S = 10.0


def watch(lines: Iterable[str]) -> tuple[list[int], list[str]]:
    """The pids to end and the directories to remove once ``lines`` ran out (none after
    ``done``)."""
    pids: list[int] = []
    dirs: list[str] = []
    for line in lines:
        word = line.rstrip("\n")
        if word.strip() == DONE:
            return [], []
        if word.strip().isdigit():
            pids.append(int(word))
        elif word.startswith(REMOVE):
            dirs.append(word[len(REMOVE) :])
    return pids, dirs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        pass
    return True


def main() -> None:
    pids, dirs = watch(sys.stdin)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + WAIT_S
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
