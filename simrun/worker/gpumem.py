"""The GPU memory of a job: the peak of ``nvidia-smi --query-gpu`` over the devices it was
granted; None where nvidia-smi does not answer."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from simrun.queues.connect import cancel_and_wait

log = logging.getLogger(__name__)

#: Seconds between two questions to nvidia-smi (it takes tens of milliseconds to answer).
SAMPLE_S = 0.5
_CALL_S = 10.0
_MIB_PER_GIB = 1024.0

T = TypeVar("T")


def query_argv(exe: str, ids: Sequence[str]) -> list[str]:
    """The ``nvidia-smi`` command line that prints ``index, MiB used`` of devices ``ids``."""
    query = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
    return [exe, *query, "-i", ",".join(ids)]


def parse_memory_used(text: str) -> dict[str, float]:
    """Device index -> GiB used, from ``index, MiB`` lines (others are skipped)."""
    used: dict[str, float] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            continue
        try:
            mib = float(parts[1])
        except ValueError:
            continue
        if mib >= 0:
            used[parts[0]] = mib / _MIB_PER_GIB
    return used


def sample(exe: str, ids: Sequence[str]) -> float | None:
    """The GiB used on devices ``ids`` now (None: nvidia-smi cannot tell; blocking)."""
    try:
        argv = query_argv(exe, ids)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_CALL_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("nvidia-smi cannot tell the GPU memory: %s", exc)
        return None
    if done.returncode != 0:
        return None
    used = parse_memory_used(done.stdout)
    found = [used[i] for i in ids if i in used]
    return sum(found) if found else None


async def measure(ids: Sequence[str], work: Awaitable[T]) -> tuple[T, float | None]:
    """Await ``work`` while sampling the memory of GPUs ``ids``: its result and the peak."""
    exe = shutil.which("nvidia-smi")
    if exe is None or not ids:
        return await work, None
    task = asyncio.ensure_future(work)
    peak: float | None = None
    try:
        while True:
            now = await asyncio.to_thread(sample, exe, ids)
            if now is not None:
                peak = now if peak is None else max(peak, now)
            done, _ = await asyncio.wait({task}, timeout=SAMPLE_S)
            if done:
                return task.result(), peak
    finally:
        await cancel_and_wait(task)
