"""The environment plugin code runs in: where a command's program is found, and how many
threads a command or a unit may use."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from simrun.plugins import command_parts

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
    """The program a ``command`` template runs; None when it cannot be split or is empty."""
    try:
        parts = command_parts(template)
    except ValueError:
        return None
    return parts[0] if parts else None


def program_dirs(path: str | None) -> list[str]:
    """Where a program is looked for: ``path`` (None: ``PATH``), then this interpreter's
    directory."""
    value = os.environ.get("PATH", os.defpath) if path is None else path
    dirs = [d for d in value.split(os.pathsep) if d]
    own = str(Path(sys.executable).parent) if sys.executable else ""
    if own and own not in dirs:
        dirs.append(own)
    return dirs


def find_program(program: str, path: str | None = None) -> str | None:
    """The executable ``program`` names (a path, or looked up in `program_dirs`); None when
    there is none. The one lookup of ``simrun-exec`` and of validation."""
    if "/" in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program, path=os.pathsep.join(program_dirs(path)))


def program_problem(template: str, path: str | None = None) -> str | None:
    """Why the program of ``template`` cannot be started here, naming it; None when found."""
    program = command_program(template)
    if program is None or find_program(program, path) is not None:
        return None
    if "/" in program:
        return f"its command's program {program!r} does not exist or is not executable"
    where = ", ".join(program_dirs(path))
    return f"its command's program {program!r} is not found on PATH nor beside simrun ({where})"


def thread_environment(processes: int) -> dict[str, str]:
    """`PROCESSES_VARIABLE` and `THREAD_VARIABLES` for plugin code sized for ``processes``."""
    n = str(max(1, processes))
    return {PROCESSES_VARIABLE: n, **dict.fromkeys(THREAD_VARIABLES, n)}


def with_threads(base: Mapping[str, str], processes: int) -> dict[str, str]:
    """``base`` with `thread_environment`, but for the thread variables it sets already."""
    merged = dict(base)
    for name, value in thread_environment(processes).items():
        if name == PROCESSES_VARIABLE or not merged.get(name):
            merged[name] = value
    return merged
