"""Task types of the staging, scratch and checkpoint tests (issue 15, items 1, 2, 3, 5).

* ``stage-units`` (splittable): unit i reads ``data.txt`` from its ``data`` input (a
  directory) and writes ``unit-<i>.json`` saying where it read it, whether that was under
  the task's scratch, and whether the scratch existed before the unit; it also writes
  ``write_kb`` KiB into the scratch (``fill-<i>.bin``), then sleeps ``hold_s`` seconds.
* ``resume`` (splittable, ``checkpoints=True``): unit i does ``steps`` steps, keeping the
  last step done in its checkpoint directory (`TaskPaths.checkpoint`); on its first
  attempt it dies (SIGKILL, as an eviction would end it) after ``crash_after`` steps. Its
  ``unit-<i>.json`` says where it resumed from and how many steps this attempt did.
* ``stage-cmd`` (command): records its argv into ``out/argv.txt`` (one part a line) and
  copies the files of its staged ``table`` input into ``out/copied/``;
  ``stage-cmd-image`` is the same in an image (through the container engine).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from simrun.plugins import ResourceHint, TaskPaths, TaskType

HINT = ResourceHint(memory_base_gb=0.1, memory_per_worker_gb=0.2)


class StageSettings(BaseModel):
    units: int = 2
    write_kb: int = 0
    hold_s: float = 0.0


class ResumeSettings(BaseModel):
    units: int = 2
    steps: int = 5
    crash_after: int = 2


class NoSettings(BaseModel):
    pass


def _write(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def count_stage(settings: StageSettings) -> int:
    return settings.units


def stage_unit(settings: StageSettings, index: int, paths: TaskPaths) -> None:
    scratch_existed = paths.scratch.is_dir()
    port = paths.inputs["data"]
    text = (port / "data.txt").read_text()
    if settings.write_kb:
        with (paths.scratch / f"fill-{index}.bin").open("wb") as fh:
            for _ in range(settings.write_kb):  # a KiB at a time: little memory
                fh.write(b"\0" * 1024)
    time.sleep(settings.hold_s)
    _write(
        paths.out / f"unit-{index}.json",
        {
            "input": str(port),
            "input_is_dir": port.is_dir(),
            "under_scratch": port.parent == paths.scratch,
            "scratch": str(paths.scratch),
            "scratch_existed": scratch_existed,
            "text": text,
        },
    )


def count_resume(settings: ResumeSettings) -> int:
    return settings.units


def resume_unit(settings: ResumeSettings, index: int, paths: TaskPaths) -> None:
    where = paths.checkpoint(index)
    state = where / "state.json"
    start = json.loads(state.read_text())["step"] if state.exists() else 0
    first_attempt = not (where / "died").exists()
    step = start
    while step < settings.steps:
        step += 1
        _write(state, {"step": step})
        if first_attempt and step == settings.crash_after:
            (where / "died").write_text("")
            os.kill(os.getpid(), signal.SIGKILL)  # as an eviction ends a process
    _write(
        paths.out / f"unit-{index}.json",
        {"resumed_from": start, "steps_this_attempt": step - start, "checkpoint": str(where)},
    )


UNITS = TaskType(
    "stage-units",
    StageSettings,
    inputs=("data",),
    hint=HINT,
    count_units=f"{__name__}:count_stage",
    compute_unit=f"{__name__}:stage_unit",
)
RESUME = TaskType(
    "resume",
    ResumeSettings,
    hint=HINT,
    checkpoints=True,
    count_units=f"{__name__}:count_resume",
    compute_unit=f"{__name__}:resume_unit",
)
_RECORD = (
    'out="$1"; shift; printf "%s\\n" "$@" > "$out/argv.txt"; '
    'mkdir "$out/copied"; cp -r "${{1#*=}}/." "$out/copied/"'
)
COMMAND = TaskType(
    "stage-cmd",
    NoSettings,
    inputs=("table",),
    hint=HINT,
    command=f"sh -c '{_RECORD}' sh {{out}} {{input}}",
)

#: ``stage-cmd`` in an image of its own: it runs through the container engine.
IMAGE_COMMAND = replace(COMMAND, name="stage-cmd-image", image="example/stage:1")

REFS = tuple(f"{__name__}:{name}" for name in ("UNITS", "RESUME", "COMMAND", "IMAGE_COMMAND"))
