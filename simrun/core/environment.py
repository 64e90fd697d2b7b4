"""The environment plugin code runs in: where a command's program is found (`find_program`)
and how many threads a command or a unit may use (`thread_environment`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

#: The variable telling a command how many processes it was sized for.
PROCESSES_VARIABLE = "SIMRUN_PROCESSES"

#: The thread counts of OpenMP, MKL, OpenBLAS, numexpr and Accelerate (vecLib).
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def command_program(template: str) -> str | None:
    """The program a ``command`` template runs (its first part, split like a shell splits
    words); None when the template cannot be split or is empty (the loader refuses those)."""
    lexer = shlex.shlex(template, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # '#' is an ordinary character in an argv
    try:
        first = lexer.get_token()
    except ValueError:
        return None
    return first or None


def program_dirs(path: str | None) -> list[str]:
    """Where a program is looked for, in order: the directories of ``path`` (a ``PATH``
    value; None: this process's), then the directory of this interpreter."""
    value = os.environ.get("PATH", os.defpath) if path is None else path
    dirs = [d for d in value.split(os.pathsep) if d]
    own = str(Path(sys.executable).parent) if sys.executable else ""
    if own and own not in dirs:
        dirs.append(own)
    return dirs


def find_program(program: str, path: str | None = None) -> str | None:
    """The executable file that ``program`` names: ``program`` itself when it holds a ``/``
    (relative to the current directory) and is an executable file; else the first
    executable ``program`` in `program_dirs` (``path`` then this interpreter's directory).
    None when there is none."""
    if "/" in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program, path=os.pathsep.join(program_dirs(path)))


def program_problem(template: str, path: str | None = None) -> str | None:
    """Why the program of ``template`` cannot be started here, in a sentence naming it;
    None when it is found (or the template has no program, which the loader refuses)."""
    program = command_program(template)
    if program is None or find_program(program, path) is not None:
        return None
    if "/" in program:
        return f"its command's program {program!r} does not exist or is not executable"
    where = ", ".join(program_dirs(path))
    return f"its command's program {program!r} is not found on PATH nor beside simrun ({where})"


def thread_environment(processes: int) -> dict[str, str]:
    """What to set for plugin code sized for ``processes`` processes: `PROCESSES_VARIABLE`
    and every one of `THREAD_VARIABLES` (1 for a command that does not use the cores of its
    pod, and for the worker processes of splittable units)."""
    n = str(max(1, processes))
    return {PROCESSES_VARIABLE: n, **dict.fromkeys(THREAD_VARIABLES, n)}


def with_threads(base: Mapping[str, str], processes: int) -> dict[str, str]:
    """``base`` (an environment) with `thread_environment`: a thread variable already set
    to a non-empty value in ``base`` is kept (the user's choice), `PROCESSES_VARIABLE` is
    always set."""
    merged = dict(base)
    for name, value in thread_environment(processes).items():
        if name == PROCESSES_VARIABLE or not merged.get(name):
            merged[name] = value
    return merged
