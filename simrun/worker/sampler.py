"""Measuring what a process really uses: its anonymous resident memory, sampled in a thread.

Anonymous memory (``RssAnon`` of ``/proc/<pid>/status``) is the memory a process cannot give
back without swapping: heap, stacks, private mappings it wrote. File-backed pages (the
program, shared libraries, the page cache of files it mapped) are left out on purpose: the
kernel reclaims them under pressure, so they say little about what a unit needs.

`MemorySampler` polls one process (and, for a command, its whole tree of descendants) from
a daemon thread, keeps the peak, and calls a callback once when a limit is passed. Every
read tolerates the process, or one of its children, exiting at any moment.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["CHILDREN_FILES", "GIB", "MemorySampler", "anon_memory_bytes", "descendants"]

log = logging.getLogger(__name__)

#: Bytes in one GiB: every ``*_gb`` figure of simrun is in GiB.
GIB = 2**30

_RSS_ANON = b"RssAnon:"

#: Whether this kernel lists a thread's children in ``/proc/<pid>/task/<tid>/children``
#: (CONFIG_PROC_CHILDREN); without it, children are found from the parent ids of all processes.
CHILDREN_FILES = os.path.exists("/proc/thread-self/children")


def _read(path: str) -> bytes | None:
    """The content of a /proc file, or None when its process is gone.

    ``os.open``/``os.read`` rather than ``open()``: a sampler reads these files thousands of
    times, and the buffered text layer costs more than the read itself.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    try:
        return os.read(fd, 8192)
    except ProcessLookupError:  # the process exited between open and read (ESRCH)
        return None
    finally:
        os.close(fd)


def _own_anon_bytes(pid: int) -> int | None:
    """``RssAnon`` of one process in bytes; None when it is gone or already a zombie."""
    data = _read(f"/proc/{pid}/status")
    if data is None:
        return None
    start = data.find(_RSS_ANON)
    if start < 0:  # a zombie (or a kernel thread) has no memory of its own any more
        return None
    end = data.find(b"\n", start)
    fields = data[start + len(_RSS_ANON) : end if end >= 0 else len(data)].split()
    # The kernel writes "RssAnon:\t  1234 kB"; the unit is always kB.
    return int(fields[0]) * 1024


def _children_from_task_files(pid: int) -> list[int]:
    """Direct children of ``pid`` from its threads' ``children`` files; [] once it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return []
    found: list[int] = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children")
        if data is not None:
            found.extend(int(x) for x in data.split())
    return found


def _parent_map() -> dict[int, list[int]]:
    """Every process's children, from the ppid field of ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        data = _read(f"/proc/{name}/stat")
        if data is None:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split
        # after the last ')'.
        rest = data[data.rfind(b")") + 2 :].split(maxsplit=2)
        if len(rest) >= 2:
            children.setdefault(int(rest[1]), []).append(int(name))
    return children


def descendants(pid: int, children_files: bool = CHILDREN_FILES) -> list[int]:
    """All living descendants of ``pid`` (children, grandchildren, ...), not ``pid`` itself.

    With ``children_files`` (the default where the kernel has them) the walk reads the
    per-thread ``children`` files of the tree only; without, it scans the parent ids of all
    processes once. A process whose parent exited was adopted by init (or a subreaper) and
    is no longer found under ``pid``.
    """
    out: list[int] = []
    if not children_files:
        tree = _parent_map()
        stack = list(tree.get(pid, ()))
        while stack:
            child = stack.pop()
            out.append(child)
            stack.extend(tree.get(child, ()))
        return out
    stack = _children_from_task_files(pid)
    seen = {pid}
    while stack:
        child = stack.pop()
        if child in seen:  # a pid reused while we walk cannot make us loop
            continue
        seen.add(child)
        out.append(child)
        stack.extend(_children_from_task_files(child))
    return out


def anon_memory_bytes(pid: int, include_children: bool = False) -> int | None:
    """Anonymous resident memory of ``pid`` in bytes, with all its descendants' when
    ``include_children``; None when ``pid`` itself is gone.

    A child that exits while it is read simply counts as zero.
    """
    own = _own_anon_bytes(pid)
    if own is None:
        return None
    if not include_children:
        return own
    return own + sum(_own_anon_bytes(child) or 0 for child in descendants(pid))


class MemorySampler:
    """Follows the anonymous memory of a process from a daemon thread and keeps its peak.

    A sample is taken at `start`, then every ``interval_s``, and once more at `stop`. When
    ``limit_gb`` is given, the first sample of the thread above it sets `exceeded` and calls
    ``on_limit(current_gb)`` once, in the sampling thread (kill the process there, say). The
    last sample of `stop` only counts toward the peak: `exceeded` is True exactly when
    ``on_limit`` was called. The thread ends by itself when the process is gone.

    Use it as a context manager, or call `start` and `stop`; `reset_peak` starts a new peak
    for a process that runs one chunk of work after another.
    """

    def __init__(
        self,
        pid: int,
        *,
        interval_s: float = 0.02,
        include_children: bool = False,
        limit_gb: float | None = None,
        on_limit: Callable[[float], None] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"MemorySampler: interval_s must be > 0, got {interval_s!r}")
        if limit_gb is not None and not limit_gb > 0:
            raise ValueError(f"MemorySampler: limit_gb must be > 0 or None, got {limit_gb!r}")
        self.pid = pid
        self.interval_s = interval_s
        self.include_children = include_children
        self.limit_gb = limit_gb
        self._limit_bytes = None if limit_gb is None else limit_gb * GIB
        self._on_limit = on_limit
        self._lock = threading.Lock()
        self._peak_bytes = 0
        self._exceeded = False
        self._gone = False
        self._samples = 0
        self._cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading ---------------------------------------------------------------------------

    def _sample(self) -> int | None:
        """One reading, folded into the peak; None once the process is gone."""
        current = anon_memory_bytes(self.pid, self.include_children)
        with self._lock:
            if current is None:
                self._gone = True
                return None
            self._samples += 1
            self._peak_bytes = max(self._peak_bytes, current)
        return current

    def _run(self) -> None:
        try:
            while True:
                current = self._sample()
                if current is None:
                    return
                if (
                    self._limit_bytes is not None
                    and not self._exceeded
                    and current > self._limit_bytes
                ):
                    self._exceeded = True
                    if self._on_limit is not None:
                        try:
                            self._on_limit(current / GIB)
                        except Exception:  # the sampler must outlive a failing callback
                            log.exception("on_limit of the memory sampler of pid %d", self.pid)
                if self._stop.wait(self.interval_s):
                    return
        finally:
            self._cpu_s = time.thread_time()

    # -- control ---------------------------------------------------------------------------

    def start(self) -> MemorySampler:
        """Start sampling in a daemon thread; returns the sampler itself."""
        if self._thread is not None:
            raise RuntimeError(f"the memory sampler of pid {self.pid} was already started")
        self._thread = threading.Thread(
            target=self._run, name=f"memory-sampler-{self.pid}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop the thread, take a last sample, and return the peak in GiB."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if not self._gone:
            self._sample()
        return self.peak_gb

    def reset_peak(self) -> None:
        """Forget the peak so far and start a new one from the current memory."""
        with self._lock:
            self._peak_bytes = 0
        if not self._gone:
            self._sample()

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- results ---------------------------------------------------------------------------

    @property
    def peak_gb(self) -> float:
        """The highest anonymous memory seen since the start (or the last reset), GiB."""
        with self._lock:
            return self._peak_bytes / GIB

    @property
    def exceeded(self) -> bool:
        """Whether a sample of the thread went above ``limit_gb`` (``on_limit`` was called)."""
        return self._exceeded

    @property
    def samples(self) -> int:
        """How many readings found the process alive."""
        with self._lock:
            return self._samples

    @property
    def cpu_s(self) -> float:
        """CPU seconds the sampling thread used, known once the thread has ended."""
        return self._cpu_s
