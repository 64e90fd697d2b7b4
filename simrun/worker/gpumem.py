"""The GPU memory of a job: the peak of ``nvidia-smi --query-gpu`` over the devices it was
granted; None where nvidia-smi does not answer."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import threading
from collections.abc import Awaitable, Sequence
from typing import TypeVar

log = logging.getLogger(__name__)

#: Seconds between two questions to nvidia-smi (it takes tens of milliseconds to answer).
SAMPLE_S = 0.5
_CALL_S = 10.0
_MIB_PER_GIB = 1024.0

T = TypeVar("T")


def query_argv(exe: str, ids: Sequence[str]) -> list[str]:
    """The ``nvidia-smi`` command line that prints ``index, MiB used`` of devices ``ids``."""
    return [
        exe,
        "--query-gpu=index,memory.used",
        "--format=csv,noheader,nounits",
        "-i",
        ",".join(ids),
    ]


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


class GpuMemorySampler:
    """The peak GPU memory (GiB) of devices ``ids`` between `start` and `stop`."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = tuple(ids)
        self.exe = shutil.which("nvidia-smi")
        self.peak_gb: float | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> float | None:
        """The GiB used on the devices now (None: nvidia-smi cannot tell)."""
        if self.exe is None or not self.ids:
            return None
        try:
            argv = query_argv(self.exe, self.ids)
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=_CALL_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.debug("nvidia-smi cannot tell the GPU memory: %s", exc)
            return None
        if done.returncode != 0:
            return None
        used = parse_memory_used(done.stdout)
        found = [used[i] for i in self.ids if i in used]
        return sum(found) if found else None

    def _loop(self) -> None:
        while True:
            now = self.sample()
            if now is not None:
                self.peak_gb = now if self.peak_gb is None else max(self.peak_gb, now)
            if self._done.wait(SAMPLE_S):
                return

    def start(self) -> None:
        if self.exe is None or not self.ids:
            return
        self._thread = threading.Thread(target=self._loop, name="simrun-gpu-memory", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        """Stop sampling; the peak seen (None: nothing known)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        return self.peak_gb


async def measure(ids: Sequence[str], work: Awaitable[T]) -> tuple[T, float | None]:
    """Await ``work`` while sampling the memory of GPUs ``ids``: its result and the peak."""
    sampler = GpuMemorySampler(ids)
    await asyncio.to_thread(sampler.start)
    try:
        result = await work
    finally:
        peak = await asyncio.to_thread(sampler.stop)
    return result, peak
