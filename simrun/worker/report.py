"""What a worker tells the service about one chunk of work: `WorkerReport`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerReport"]


@dataclass(frozen=True)
class WorkerReport:
    """The measurements of one job (a chunk of units, a merge or a command) on a worker.

    ``peak_memory_gb`` holds the peak anonymous memory of each worker process that ran the
    job (one entry for a chunk; one per process for a command that uses the cores of its
    container), in GiB. ``seconds_per_unit`` is the wall time of one unit in one process
    (None when no unit completed). ``limit_gb`` is the memory per process the job ran
    under, and ``killed_for_memory`` says whether a process was killed for exceeding it.
    """

    peak_memory_gb: tuple[float, ...]
    seconds_per_unit: float | None
    units: int
    limit_gb: float
    killed_for_memory: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain data for msgpack or JSON (never pickle)."""
        return {
            "peak_memory_gb": list(self.peak_memory_gb),
            "seconds_per_unit": self.seconds_per_unit,
            "units": self.units,
            "limit_gb": self.limit_gb,
            "killed_for_memory": self.killed_for_memory,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerReport:
        """The report that `to_dict` wrote; `ValueError` names a missing or bad field."""
        try:
            peaks = tuple(float(x) for x in data["peak_memory_gb"])
            spu = data["seconds_per_unit"]
            return cls(
                peak_memory_gb=peaks,
                seconds_per_unit=None if spu is None else float(spu),
                units=int(data["units"]),
                limit_gb=float(data["limit_gb"]),
                killed_for_memory=bool(data.get("killed_for_memory", False)),
            )
        except KeyError as exc:
            raise ValueError(f"worker report lacks the field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"worker report has a bad field: {exc}") from exc
