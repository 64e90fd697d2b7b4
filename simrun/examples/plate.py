"""The plate of the heat example: what its source file (JSON) says and the grid built from
it. Positions are fractions of the unit square; temperatures are in degrees Celsius."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simrun.examples.files import JsonFileError, read_json

ABSOLUTE_ZERO_C = -273.15

Temperature = Annotated[float, Field(ge=ABSOLUTE_ZERO_C, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
FloatGrid = npt.NDArray[np.float64]


class PlateError(ValueError):
    """A plate source that cannot be used, naming the file and what is wrong with it."""


class FixedRegion(BaseModel):
    """A rectangle of the plate held at ``temperature``; ``x`` and ``y`` are (from, to)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    x: tuple[Fraction, Fraction]
    y: tuple[Fraction, Fraction]
    temperature: Temperature

    @model_validator(mode="after")
    def _ordered(self) -> FixedRegion:
        for axis, (low, high) in (("x", self.x), ("y", self.y)):
            if low > high:
                raise ValueError(f"{axis} goes from {low:g} down to {high:g}; give (from, to)")
        return self


class PlateSpec(BaseModel):
    """The contents of a plate source file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "plate"
    initial_temperature: Temperature = 20.0
    fixed_regions: list[FixedRegion] = Field(default_factory=list, max_length=1000)


@dataclass(frozen=True)
class PlateGrid:
    """A plate sampled on an n-by-n grid, shared read-only by the units of a task: the
    starting field, and ``free`` (the interior: 1.0 where cells evolve, 0.0 where held)."""

    initial: FloatGrid
    free: FloatGrid

    @property
    def size(self) -> int:
        """Cells along one side."""
        return int(self.initial.shape[0])


def plate_file(port_path: Path) -> Path:
    """The plate file behind an input port: the path itself, or the one ``*.json`` file in it
    when the port points at a directory."""
    if not port_path.is_dir():
        return port_path
    candidates = sorted(port_path.glob("*.json"))
    if len(candidates) != 1:
        found = ", ".join(p.name for p in candidates) or "none"
        raise PlateError(
            f"{port_path}: expected exactly one plate .json file in the directory, found {found}"
        )
    return candidates[0]


def load_plate(path: Path) -> PlateSpec:
    """Read and check the plate source at ``path``; `PlateError` says what is wrong where."""
    try:
        raw = read_json(path)
    except JsonFileError as exc:
        why = "cannot read the plate file" if exc.unreadable else "the plate file is not valid JSON"
        raise PlateError(f"{path}: {why}: {exc.detail}") from exc
    try:
        return PlateSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PlateError(f"{path}: {where}: {message}{more}") from exc


def _cells(span: tuple[float, float], size: int) -> slice:
    """The grid cells a fractional span covers: from the cell nearest its start to the cell
    nearest its end, so every region covers at least one cell."""
    low, high = (round(f * (size - 1)) for f in span)
    return slice(low, high + 1)


def build_grid(spec: PlateSpec, size: int) -> PlateGrid:
    """Sample ``spec`` on a ``size``-by-``size`` grid. Fixed regions only hold interior cells;
    the edges belong to the boundary temperature of each unit. Later regions win overlaps."""
    initial = np.full((size, size), spec.initial_temperature, dtype=np.float64)
    held = np.zeros((size, size), dtype=bool)
    for region in spec.fixed_regions:
        rows, cols = _cells(region.y, size), _cells(region.x, size)
        initial[rows, cols] = region.temperature
        held[rows, cols] = True
    free = np.where(held[1:-1, 1:-1], 0.0, 1.0)
    initial.flags.writeable = False
    free.flags.writeable = False
    return PlateGrid(initial=initial, free=free)
