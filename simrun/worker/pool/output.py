"""What worker processes print, on its way to the units' logs, capped per unit: `CappedSegment`
(pure) keeps a unit's head and tail within a cap; `CappedLog` splits a process's pipe at each
unit's end marker into its log; `copy_capped` caps simrun-exec's."""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from simrun.core.unitlogs import attempt_paths, write_atomic
from simrun.core.wire import UnitKey
from simrun.worker.pool.protocol import write_all

#: Bytes of output one unit may keep in its log (head and tail together).
DEFAULT_UNIT_LOG_CAP = 2**20
#: Bytes of each of a command's log files, stdout and stderr (head and tail together).
DEFAULT_COMMAND_LOG_CAP = 64 * 2**20
_READ_BYTES = 64 * 1024
#: What a worker process writes after each unit: this, the unit's index and a NUL.
_MARK = b"\x00\x1esimrun-unit-end:"
#: A marker longer than this is not one (its bytes are output).
_MARK_MAX = len(_MARK) + 24


def unit_end_marker(index: int) -> bytes:
    """The marker a worker process writes after unit ``index`` of a batch ended."""
    return _MARK + str(index).encode() + b"\x00"


class CappedSegment:
    """The output of one unit: `feed` gives what to write now (the head), `end` what to
    write once it is over (a note on what was dropped, then the tail). ``cap`` 0 keeps
    everything; ``scope`` is what the cap is of ("a unit", "a stream")."""

    def __init__(self, cap: int, scope: str = "a unit") -> None:
        if cap < 0:
            raise ValueError(f"a log cap must be >= 0 bytes, got {cap}")
        self.cap = cap
        self.scope = scope
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self._head = 0
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.dropped = 0

    def feed(self, data: bytes) -> bytes:
        """Take ``data``; returns the part to write at once."""
        if not self.cap:
            return data
        room = max(0, self.head_cap - self._head)
        now, later = data[:room], data[room:]
        self._head += len(now)
        if later:
            self._tail.append(later)
            self._tail_bytes += len(later)
            while self._tail_bytes > self.tail_cap:
                extra = self._tail_bytes - self.tail_cap
                first = self._tail[0]
                if len(first) <= extra:
                    self._tail.popleft()
                    self._tail_bytes -= len(first)
                    self.dropped += len(first)
                else:
                    self._tail[0] = first[extra:]
                    self._tail_bytes -= extra
                    self.dropped += extra
        return now

    def end(self, label: str) -> bytes:
        """What to write as the segment of ``label`` ends; the next one starts empty."""
        tail = b"".join(self._tail)
        note = b""
        if self.dropped:
            note = (
                f"\n[simrun: {label}: dropped {self.dropped} bytes of output beyond the "
                f"{self.cap}-byte cap of {self.scope}; its last {len(tail)} bytes follow]\n"
            ).encode()
        self._head, self._tail, self._tail_bytes, self.dropped = 0, deque(), 0, 0
        return note + tail


@dataclass
class UnitLogSink:
    """Where the output of one job's units goes; ``orphan_unit`` is the unit its process died
    in (what it printed last goes there)."""

    task_logs: Path
    attempt: int
    written: dict[UnitKey, int] = field(default_factory=dict)
    orphan_unit: UnitKey | None = None
    #: A dead process's last output, read before its unit was known (`settle_orphan`).
    orphan_output: bytes = b""
    #: The unit whose log got that output live (it may not be the one the runner names).
    orphan_live: UnitKey | None = None

    def path(self, unit: UnitKey) -> Path:
        return attempt_paths(self.task_logs, unit, self.attempt)[1]

    def settle_orphan(self) -> None:
        """Write the last output of a process that died to the unit it died in (blocking)."""
        data, self.orphan_output = self.orphan_output, b""
        live, self.orphan_live = self.orphan_live, None
        if live is not None and live != self.orphan_unit:
            self.drop_live(live)
        if data and self.orphan_unit is not None:
            self.write(self.orphan_unit, data)

    def write(self, unit: UnitKey, data: bytes) -> None:
        """Write ``data`` as the output of ``unit`` (blocking), after what it had."""
        path = self.path(unit)
        if unit in self.written and path.is_file():
            data = path.read_bytes() + data
        write_atomic(path, data)
        self.written[unit] = len(data)

    def write_live(self, unit: UnitKey, data: bytes, fresh: bool) -> None:
        """Write ``data`` to the log of ``unit`` while it runs (blocking): anew when
        ``fresh``, else appended; always the start of what `write` writes at its end."""
        path = self.path(unit)
        if fresh:
            path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb" if fresh else "ab") as f:
            f.write(data)

    def drop_live(self, unit: UnitKey) -> None:
        """Remove what was written live to ``unit``'s log, not its output after all."""
        if unit not in self.written:
            self.path(unit).unlink(missing_ok=True)


#: The most markers a log remembers for `CappedLog.settle` (more than a batch holds).
_MARKS_KEPT = 4096
#: Seconds the runner waits for the marker of a batch's last unit (normally there already).
SETTLE_S = 1.0


class CappedLog:
    """The log of one worker process, each unit's output capped and sent to its unit's log."""

    def __init__(self, cap: int, fd: int = 2) -> None:
        self.segment = CappedSegment(cap)
        self.fd = fd
        self._lock = asyncio.Lock()
        #: The label of unit ``index`` of the batch running ("unit 4 of job ...").
        self.label_of: Callable[[int], str] = lambda index: f"unit {index}"
        #: The unit whose output the open segment is, given the last marker read (or None).
        self.open_unit: Callable[[int | None], UnitKey | None] = lambda last: None
        self._sink: UnitLogSink | None = None
        self._captured = bytearray()
        self._last_mark: int | None = None
        #: The unit whose log holds the open segment so far, and how many bytes of it.
        self._live_unit: UnitKey | None = None
        self._live_bytes = 0
        #: The markers read since the runner last asked (`settle`), in order.
        self._marked: deque[int] = deque(maxlen=_MARKS_KEPT)
        self._marker = asyncio.Event()

    @property
    def sink(self) -> UnitLogSink | None:
        """Where the units' logs of the job running go (None: no job)."""
        return self._sink

    @sink.setter
    def sink(self, sink: UnitLogSink | None) -> None:
        self._sink = sink
        self._last_mark = None  # a marker of an earlier job says nothing of this one's
        self._live_unit, self._live_bytes = None, 0

    async def _write(self, data: bytes) -> None:
        """The capped output of the open segment: held for the unit's log (and written to
        it live when the unit is known) while a job runs, else to the worker's log."""
        if data:
            if self.sink is not None:
                self._captured += data
                await self._live(self.sink)
                return
            await self._to_fd(data)

    async def _live(self, sink: UnitLogSink) -> None:
        """Bring the log of the unit running up to date with what its segment holds."""
        unit = self.open_unit(self._last_mark)
        if unit is None:
            return
        fresh = unit != self._live_unit
        if fresh and self._live_unit is not None:
            await asyncio.to_thread(sink.drop_live, self._live_unit)
        data = bytes(self._captured) if fresh else bytes(self._captured[self._live_bytes :])
        self._live_unit, self._live_bytes = unit, len(self._captured)
        try:
            await asyncio.to_thread(sink.write_live, unit, data, fresh)
        except OSError:  # the unit's log is written whole at its end all the same
            self._live_unit, self._live_bytes = None, 0

    async def _to_fd(self, data: bytes) -> None:
        async with self._lock:
            await asyncio.to_thread(write_all, self.fd, data)

    async def _deliver(self, unit: UnitKey | None, label: str, ended: bool = False) -> None:
        """The segment of ``label`` that ended was ``unit``'s: its bytes go to the unit's log
        and a line saying where to the worker's log. A dead process's last output
        (``ended``) waits in the sink for its unit (`UnitLogSink.settle_orphan`)."""
        live, self._live_unit, self._live_bytes = self._live_unit, None, 0
        if not self._captured:
            return  # the unit printed nothing (the common case): no work at all
        data = bytes(self._captured)
        self._captured.clear()
        sink = self.sink
        if unit is None and sink is not None:
            unit = sink.orphan_unit
            if unit is None and ended:
                sink.orphan_output += data
                sink.orphan_live = live
                await self._to_fd(
                    f"[simrun: {label}: {len(data)} bytes, kept in the log of the unit its "
                    "process died in]\n".encode()
                )
                return
        if sink is not None and live is not None and live != unit:
            await asyncio.to_thread(sink.drop_live, live)
        if sink is None or unit is None:
            await self._to_fd(data)
            return
        await asyncio.to_thread(sink.write, unit, data)
        where = sink.path(unit)
        await self._to_fd(f"[simrun: {label}: {len(data)} bytes of output in {where}]\n".encode())

    async def settle(self, index: int, timeout_s: float = SETTLE_S) -> bool:
        """Whether the marker of unit ``index`` was read within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while index not in self._marked:
            self._marker.clear()
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._marker.wait(), left)
            except TimeoutError:
                return False
        while self._marked.popleft() != index:  # it and the markers before it are over
            pass
        return True

    async def copy(self, reader: asyncio.StreamReader) -> None:
        """Copy ``reader`` until end of file, then write what the last segment held."""
        held = b""
        while True:
            data = await reader.read(_READ_BYTES)
            if not data:
                break
            held = await self._take(held + data)
        await self._write(self.segment.feed(held))
        last = "the worker process's last output"
        await self._write(self.segment.end(last))
        await self._deliver(None, last, ended=True)

    async def _take(self, data: bytes) -> bytes:
        """Feed ``data`` up to its markers; returns bytes that may start a marker."""
        while data:
            at = data.find(_MARK)
            if at < 0:
                keep = _partial_mark(data)
                await self._write(self.segment.feed(data[: len(data) - keep]))
                return data[len(data) - keep :]
            await self._write(self.segment.feed(data[:at]))
            data = data[at:]
            close = data.find(b"\x00", len(_MARK))
            if close < 0:
                if len(data) < _MARK_MAX:
                    return data  # the rest of the marker comes with the next read
                close = -1
            digits = data[len(_MARK) : close] if close > 0 else b""
            if close < 0 or not digits.isdigit():  # not a marker after all: output
                await self._write(self.segment.feed(data[:1]))
                data = data[1:]
                continue
            index = int(digits)
            label = self.label_of(index)
            await self._write(self.segment.end(label))
            await self._deliver(index, label)
            self._last_mark = index
            self._marked.append(index)
            self._marker.set()
            data = data[close + 1 :]
        return b""

    async def end_unit(self, label: str, unit: UnitKey | None = None) -> None:
        """The unit ``label`` ended without its marker: write what its segment held back."""
        await self._write(self.segment.end(label))
        await self._deliver(unit, label)


def _partial_mark(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a marker."""
    for size in range(min(len(_MARK) - 1, len(data)), 0, -1):
        if _MARK.startswith(data[-size:]):
            return size
    return 0


#: Seconds `copy_capped` still waits for output once told the writers are gone.
_LINGER_S = 0.2


def copy_capped(
    source: int, sink: BinaryIO, segment: CappedSegment, label: str, done: threading.Event
) -> None:
    """Copy ``source`` to ``sink`` through ``segment`` (blocking) until end of file, or once
    ``done`` is set and nothing came for a moment (an escaped writer may hold the pipe)."""
    while True:
        ready, _, _ = select.select([source], [], [], _LINGER_S)
        if not ready:
            if done.is_set():
                break
            continue
        data = os.read(source, _READ_BYTES)
        if not data:
            break
        sink.write(segment.feed(data))
        sink.flush()  # `simrun logs --follow` reads the file as it grows
    sink.write(segment.end(label))
    sink.flush()
