"""Test task types of one command each: a worker runs a command job with the template of
its type as installed, so each command a test runs through a worker is a type here."""

from __future__ import annotations

import sys

from simrun.plugins import TaskType
from tests.support import REPO
from tests.support.tasks import Settings

#: The script of `tests.support.exec_commands` (daemons that escape, chatty streams).
EXEC_COMMANDS = f"{sys.executable} {REPO / 'tests' / 'support' / 'exec_commands.py'}"

#: Writes "installed" to ``out/ran``: what a test sees when the installed template ran.
ECHO = TaskType(
    name="test-echo", settings=Settings, command="sh -c 'echo installed > \"$1/ran\"' sh {out}"
)
#: Writes when it started and ended (``out/start``, ``out/end``), 0.6 s apart.
TIMED = TaskType(
    name="test-timed",
    settings=Settings,
    command='sh -c \'date +%s.%N > "$1/start"; sleep 0.6; date +%s.%N > "$1/end"\' sh {out}',
)
#: Prints on both streams and fails (exit code 3).
PRINTS = TaskType(
    name="test-prints", settings=Settings, command="sh -c 'echo to-out; echo to-err >&2; exit 3'"
)
#: Writes 50 MiB to each of stdout and stderr.
CHATTY = TaskType(name="test-chatty", settings=Settings, command=f"{EXEC_COMMANDS} chatty 50")
#: Leaves a daemon holding 700 MiB (its pid in ``out/daemon.pid``), waits 60 s.
ESCAPE = TaskType(
    name="test-escape",
    settings=Settings,
    command=f"{EXEC_COMMANDS} escape {{out}}/daemon.pid 700 60",
)
