"""Task types that show the environment simrun gives plugin code (loaded with ``--plugins``).

``env-cores`` is a command of a type that ``uses_cores``, ``env-one`` one that does not:
each writes its whole environment (``env``) to ``env.txt`` in its output directory.
``env-unit`` is splittable: each unit writes the variables of `NAMES` from ``os.environ``
of its worker process to ``unit-<index>.txt``.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType

#: The variables the tests look at.
NAMES = (
    "SIMRUN_PROCESSES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
_PRINT = 'env > "$1/env.txt"'


class Settings(BaseModel):
    units: int = 2


def count_units(settings: Settings) -> int:
    return settings.units


def compute_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    paths.out.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{n}={os.environ.get(n, '')}\n" for n in NAMES)
    tmp = paths.out / f".unit-{index}.txt.tmp"
    tmp.write_text(text)
    tmp.replace(paths.out / f"unit-{index}.txt")


_HINT = ResourceHint(memory_base_gb=0.05, memory_per_worker_gb=0.05)
CORES = TaskType(
    "env-cores", Settings, command=f"sh -c '{_PRINT}' sh {{out}}", uses_cores=True, hint=_HINT
)
ONE = TaskType("env-one", Settings, command=f"sh -c '{_PRINT}' sh {{out}}", hint=_HINT)
UNIT = TaskType(
    "env-unit",
    Settings,
    count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:compute_unit",
    hint=_HINT,
)


def read_env(path: os.PathLike[str] | str) -> dict[str, str]:
    """The ``NAME=VALUE`` lines of a file written by these types."""
    with open(path) as fh:
        return dict(line.rstrip("\n").split("=", 1) for line in fh if "=" in line)
