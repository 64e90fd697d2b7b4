"""`ReportSpool`: the reports a worker could not write while Redis was away, kept in order
until delivered: in memory, then in a fsync'd file, then dropped (`SpoolBounds.admit`)."""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from simrun.core.reports import ReportEntry, RunningJob
from simrun.core.signing import JobKey

log = logging.getLogger(__name__)

MIB = 2**20
DEFAULT_MEMORY_MB = 16.0
DEFAULT_DISK_MB = 256.0

Place = Literal["memory", "disk", "drop"]


@dataclass(frozen=True)
class SpoolBounds:
    """How much the spool keeps: ``memory_bytes`` in memory, then ``disk_bytes`` on disk."""

    memory_bytes: int = int(DEFAULT_MEMORY_MB * MIB)
    disk_bytes: int = int(DEFAULT_DISK_MB * MIB)

    def admit(self, size: int, in_memory: int, on_disk: int) -> Place:
        """Where a report of ``size`` bytes goes: memory while nothing waits on disk (a report
        never jumps ahead of older ones) and it fits, else disk while it fits, else nowhere."""
        if on_disk == 0 and in_memory + size <= self.memory_bytes:
            return "memory"
        if on_disk + size <= self.disk_bytes:
            return "disk"
        return "drop"


@dataclass(frozen=True)
class _Kept:
    job: RunningJob
    size: int
    line: bytes | None  # None: on disk


class ReportSpool:
    """Reports kept in order until written; ``path`` holds those past the memory bound."""

    def __init__(self, path: Path, key: JobKey, bounds: SpoolBounds | None = None) -> None:
        self.path = path
        #: Signs the reports kept (they are written to Redis as they are kept).
        self.key = key
        self.bounds = bounds or SpoolBounds()
        self._kept: deque[_Kept] = deque()
        self._in_memory = 0
        self._on_disk = 0
        self._disk_offset = 0  # bytes of the file already delivered
        self.dropped = 0
        self._warned_full = False

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def sizes(self) -> tuple[int, int]:
        """Bytes kept in memory and on disk."""
        return self._in_memory, self._on_disk

    def jobs(self) -> list[RunningJob]:
        """The jobs whose reports wait here (for the heartbeat)."""
        return [k.job for k in self._kept]

    def add(self, entry: ReportEntry, job: RunningJob) -> bool:
        """Keep a report; False when it was dropped (both bounds reached)."""
        line = json.dumps(entry.to_fields(self.key), separators=(",", ":")).encode() + b"\n"
        place = self.bounds.admit(len(line), self._in_memory, self._on_disk)
        if place == "memory":
            self._kept.append(_Kept(job, len(line), line))
            self._in_memory += len(line)
            return True
        if place == "disk":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            self._kept.append(_Kept(job, len(line), None))
            self._on_disk += len(line)
            return True
        self.dropped += 1
        if not self._warned_full:
            self._warned_full = True
            log.error(
                "report spool full (%g MiB in memory, %g MiB in %s): dropping the reports of "
                "jobs that end from now on until Redis is back; the service will dispatch "
                "their units again", self.bounds.memory_bytes / MIB,
                self.bounds.disk_bytes / MIB, self.path,
            )  # fmt: skip
        return False

    def _read_line(self, size: int) -> bytes:
        with self.path.open("rb") as fh:
            fh.seek(self._disk_offset)
            line = fh.read(size)
        if len(line) != size:
            raise OSError(f"report spool {self.path} is shorter than what was written to it")
        return line

    async def deliver(self, write: Callable[[ReportEntry], Awaitable[None]]) -> int:
        """Write the kept reports in order (each forgotten once written); how many."""
        delivered = 0
        while self._kept:
            kept = self._kept[0]
            line = kept.line if kept.line is not None else self._read_line(kept.size)
            await write(ReportEntry.from_fields(json.loads(line), self.key))
            self._kept.popleft()
            delivered += 1
            if kept.line is not None:
                self._in_memory -= kept.size
            else:
                self._disk_offset += kept.size
                self._on_disk -= kept.size
        if self._disk_offset:
            self.path.unlink(missing_ok=True)
            self._disk_offset = 0
        self._warned_full = False
        return delivered

    def discard(self) -> None:
        """Remove the file (the worker ends: what it kept is lost with it)."""
        self.path.unlink(missing_ok=True)
