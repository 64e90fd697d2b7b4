"""A splittable task type that needs a GPU (loaded with ``--plugins``): each unit writes the
``CUDA_VISIBLE_DEVICES`` its worker process was given to ``unit-<index>.txt`` and, as "GPU
memory" the fake ``nvidia-smi`` then reports, 512 MiB on its device
(``FAKE_SMI_DIR/gpu-<device>.mib``), held for a moment so that it is sampled, then freed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType


class Settings(BaseModel):
    units: int = 4
    hold_s: float = 1.2


def count_units(settings: Settings) -> int:
    return settings.units


def compute_unit(settings: Settings, index: int, paths: TaskPaths) -> None:
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    state = os.environ.get("FAKE_SMI_DIR")
    held = Path(state) / f"gpu-{devices}.mib" if state and "," not in devices else None
    if held is not None:
        held.write_text("512")
    time.sleep(settings.hold_s)
    if held is not None:
        held.unlink()
    paths.out.mkdir(parents=True, exist_ok=True)
    (paths.out / f"unit-{index}.txt").write_text(devices)


GPU_UNIT = TaskType(
    "gpu-unit",
    Settings,
    count_units=f"{__name__}:count_units",
    compute_unit=f"{__name__}:compute_unit",
    hint=ResourceHint(memory_base_gb=0.05, memory_per_worker_gb=0.05, gpus=1),
)
