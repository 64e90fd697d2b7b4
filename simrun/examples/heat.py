"""The ``heat`` task type: explicit 2-D heat diffusion on a plate, swept over diffusivity and
edge temperature, one unit per point (``point-<i>.json``); the merge writes ``summary.csv``."""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simrun.examples.files import write_atomic
from simrun.examples.plate import (
    ABSOLUTE_ZERO_C,
    FloatGrid,
    PlateError,
    PlateGrid,
    build_grid,
    load_plate,
    plate_file,
)
from simrun.plugins import ResourceHint, TaskPaths, TaskType

MAX_GRID = 1024
MAX_VALUES = 1000
SUMMARY_NAME = "summary.csv"
SUMMARY_COLUMNS = (
    "index", "diffusivity", "boundary_temperature", "grid", "steps", "dt", "final_time",
    "steady", "time_to_steady", "mean_temperature", "min_temperature", "max_temperature",
    "center_temperature",
)  # fmt: skip

Diffusivity = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
Temperature = Annotated[float, Field(ge=ABSOLUTE_ZERO_C, allow_inf_nan=False)]


class MissingPointsError(RuntimeError):
    """The merge found points of the sweep without their result file."""

    def __init__(self, out: Path, missing: Sequence[int], total: int) -> None:
        self.missing = tuple(missing)
        super().__init__(
            f"cannot merge {out}: {len(self.missing)} of {total} points have no result "
            f"file: indices {_ranges(self.missing)}"
        )


class HeatSettings(BaseModel):
    """The settings of a heat sweep; the defaults are the demo (24 points of about 0.06 s).
    Diffusivities are in plate widths² per time unit, temperatures in °C, ``duration`` in
    time units; a field is steady below a change of ``tolerance`` degrees per time unit, and
    the time step is ``cfl`` times its stability limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grid: int = Field(default=64, ge=8, le=MAX_GRID, description="cells along one side")
    diffusivities: list[Diffusivity] = Field(
        default=[0.1, 0.3, 1.0, 3.0], min_length=1, max_length=MAX_VALUES
    )
    boundary_temperatures: list[Temperature] = Field(
        default=[0.0, 10.0, 20.0, 30.0, 40.0, 50.0], min_length=1, max_length=MAX_VALUES
    )
    duration: float = Field(default=0.25, gt=0.0, allow_inf_nan=False)
    tolerance: float = Field(default=0.01, gt=0.0, allow_inf_nan=False)
    cfl: float = Field(default=0.9, gt=0.0, le=1.0)
    max_steps: int = Field(default=200_000, gt=0)
    save_fields: bool = False

    @field_validator("diffusivities", "boundary_temperatures")
    @classmethod
    def _distinct(cls, values: list[float]) -> list[float]:
        seen: set[float] = set()
        for value in values:
            if value in seen:
                raise ValueError(f"{value:g} is given twice")
            seen.add(value)
        return values

    @model_validator(mode="after")
    def _affordable(self) -> HeatSettings:
        fastest = max(self.diffusivities)
        needed = steps_needed(self, fastest)
        if needed > self.max_steps:
            raise ValueError(
                f"duration {self.duration:g} needs {needed} time steps at grid {self.grid} "
                f"and diffusivity {fastest:g}, more than max_steps {self.max_steps}; "
                "shorten duration, coarsen grid or raise max_steps"
            )
        return self

    @property
    def points(self) -> int:
        """Number of points of the sweep."""
        return len(self.diffusivities) * len(self.boundary_temperatures)

    def point(self, index: int) -> tuple[float, float]:
        """(diffusivity, boundary temperature) of point ``index``, edge temperature fastest."""
        if not 0 <= index < self.points:
            raise IndexError(f"point {index} is outside the sweep of {self.points} points")
        row, col = divmod(index, len(self.boundary_temperatures))
        return self.diffusivities[row], self.boundary_temperatures[col]


# --- numerics ----------------------------------------------------------------------------


def steps_needed(settings: HeatSettings, diffusivity: float) -> int:
    """Time steps that cover ``duration`` without breaking the stability limit."""
    dx = 1.0 / (settings.grid - 1)
    dt_limit = settings.cfl * dx * dx / (4.0 * diffusivity)
    return max(1, math.ceil(settings.duration / dt_limit))


def _march(
    field: FloatGrid, free_coef: FloatGrid, steps: int, threshold: float
) -> tuple[int, bool]:
    """Advance ``field`` in place by up to ``steps`` steps, until no cell changes by
    ``threshold``; the steps taken and whether it came to rest."""
    inner = field[1:-1, 1:-1]
    change = np.empty_like(inner)
    work = np.empty_like(inner)
    for step in range(1, steps + 1):
        np.add(field[:-2, 1:-1], field[2:, 1:-1], out=change)
        change += field[1:-1, :-2]
        change += field[1:-1, 2:]
        np.multiply(inner, 4.0, out=work)
        change -= work
        change *= free_coef
        inner += change
        if float(np.abs(change, out=work).max()) < threshold:
            return step, True
    return steps, False


def _center(field: FloatGrid) -> float:
    """Temperature at the middle of the plate (mean of the middle cells of an even grid)."""
    n = field.shape[0]
    middle = slice((n - 1) // 2, n // 2 + 1)
    return float(field[middle, middle].mean())


def simulate(
    plate: PlateGrid, settings: HeatSettings, index: int
) -> tuple[dict[str, Any], FloatGrid]:
    """Solve point ``index`` on ``plate``: its result record and its final field."""
    diffusivity, boundary = settings.point(index)
    steps = steps_needed(settings, diffusivity)
    dt = settings.duration / steps
    dx = 1.0 / (plate.size - 1)
    field = np.array(plate.initial, dtype=np.float64)
    field[0, :] = field[-1, :] = field[:, 0] = field[:, -1] = boundary
    free_coef = plate.free * (diffusivity * dt / (dx * dx))
    taken, steady = _march(field, free_coef, steps, settings.tolerance * dt)
    record: dict[str, Any] = {
        "index": index,
        "diffusivity": diffusivity,
        "boundary_temperature": boundary,
        "grid": plate.size,
        "steps": taken,
        "dt": dt,
        "final_time": taken * dt,
        "steady": steady,
        "time_to_steady": taken * dt if steady else None,
        "mean_temperature": float(field.mean()),
        "min_temperature": float(field.min()),
        "max_temperature": float(field.max()),
        "center_temperature": _center(field),
    }
    return record, field


# --- the task's functions ----------------------------------------------------------------


def _parse(settings: Mapping[str, Any] | HeatSettings) -> HeatSettings:
    if isinstance(settings, HeatSettings):
        return settings
    return HeatSettings.model_validate(dict(settings))


def _plate(settings: HeatSettings, paths: TaskPaths) -> PlateGrid:
    """The plate of the task on its grid, from this process's cache or built now."""
    port = paths.inputs.get("plate")
    if port is None:
        raise PlateError(
            "the task has no input 'plate'; connect it, e.g. inputs: {plate: 'source:plate'}"
        )
    path = plate_file(port)
    try:
        stat = path.stat()
    except OSError as exc:
        raise PlateError(f"{path}: cannot read the plate file: {exc.strerror or exc}") from exc
    return _shared_plate(path, stat.st_mtime_ns, stat.st_size, settings.grid)


@functools.lru_cache(maxsize=4)
def _shared_plate(path: Path, _mtime_ns: int, _size: int, grid: int) -> PlateGrid:
    """A plate sampled on a grid, kept per process so the units of a task share one (a file
    changed since is another key)."""
    return build_grid(load_plate(path), grid)


def clear_cache() -> None:
    """Forget the plates this process has built (the next unit builds its plate again)."""
    _shared_plate.cache_clear()


def point_name(index: int) -> str:
    """File name of the result of point ``index``."""
    return f"point-{index:06d}.json"


def field_name(index: int) -> str:
    """File name of the final field of point ``index`` (written with ``save_fields``)."""
    return f"point-{index:06d}.npy"


def count_units(settings: Mapping[str, Any] | HeatSettings) -> int:
    """Number of units: one per point of the sweep."""
    return _parse(settings).points


def setup(settings: Mapping[str, Any] | HeatSettings, paths: TaskPaths) -> None:
    """Read the plate and sample it on the grid once for all units of this process."""
    _plate(_parse(settings), paths)


def compute_unit(settings: Mapping[str, Any] | HeatSettings, index: int, paths: TaskPaths) -> None:
    """Solve point ``index`` and write its result file(s) into ``paths.out``, atomically."""
    parsed = _parse(settings)
    record, field = simulate(_plate(parsed, paths), parsed, index)
    if parsed.save_fields:
        buffer = io.BytesIO()
        np.save(buffer, field, allow_pickle=False)
        write_atomic(paths.out / field_name(index), buffer.getvalue())
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    write_atomic(paths.out / point_name(index), text.encode())


def merge(settings: Mapping[str, Any] | HeatSettings, paths: TaskPaths) -> None:
    """Write ``summary.csv``, a row per point by index (`MissingPointsError` naming those
    without a result file)."""
    total = _parse(settings).points
    files = [paths.out / point_name(i) for i in range(total)]
    missing = [i for i, path in enumerate(files) if not path.is_file()]
    if missing:
        raise MissingPointsError(paths.out, missing, total)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(SUMMARY_COLUMNS)
    for index, path in enumerate(files):
        writer.writerow(_summary_row(path, index))
    write_atomic(paths.out / SUMMARY_NAME, text.getvalue().encode())


def _summary_row(path: Path, index: int) -> list[str]:
    record = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(record, dict) or record.get("index") != index:
        raise ValueError(f"{path}: not the result of point {index}")
    return [_cell(record.get(column)) for column in SUMMARY_COLUMNS]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _ranges(indices: Sequence[int], limit: int = 20) -> str:
    """``0, 3-5, 9`` for [0, 3, 4, 5, 9]; long lists end with how many runs were left out."""
    runs: list[str] = []
    # an index less its position stays the same along a run of consecutive indices
    for _, run in itertools.groupby(enumerate(indices), lambda pair: pair[1] - pair[0]):
        block = [index for _, index in run]
        runs.append(str(block[0]) if len(block) == 1 else f"{block[0]}-{block[-1]}")
    shown = ", ".join(runs[:limit])
    return shown + (f" and {len(runs) - limit} more runs" if len(runs) > limit else "")


TASK_TYPE = TaskType(
    name="heat",
    settings=HeatSettings,
    inputs=("plate",),
    hint=ResourceHint(memory_base_gb=0.5, memory_per_worker_gb=1.0),
    count_units="simrun.examples.heat:count_units",
    setup="simrun.examples.heat:setup",
    compute_unit="simrun.examples.heat:compute_unit",
    merge="simrun.examples.heat:merge",
    cost_setting="grid",
    description="2-D heat diffusion on a plate, swept over diffusivity and edge temperature",
)
