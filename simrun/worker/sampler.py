"""Measuring what a process really uses: its anonymous resident memory, sampled in a thread.

Anonymous memory (``RssAnon`` of ``/proc/<pid>/status``) is the memory a process cannot give
back without swapping: heap, stacks, private mappings it wrote. File-backed pages (the
program, shared libraries, the page cache of files it mapped) are left out on purpose: the
kernel reclaims them under pressure, so they say little about what a unit needs.

`MemorySampler` polls one process (with its whole tree of descendants, or with the other
members of its cgroup, see ``members``) from a daemon thread, keeps the peak, and calls a
callback once when a limit is passed. The tree is read by `simrun.worker.proctree`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType

from simrun.core.sizing import GIB
from simrun.worker.proctree import anon_bytes_of, anon_memory_bytes, own_anon_bytes

log = logging.getLogger(__name__)


class MemorySampler:
    """Follows the anonymous memory of a process from a daemon thread and keeps its peak.

    A sample is taken at `start`, then every ``interval_s``, and once more at `stop`. When
    ``limit_gb`` is given, the first sample of the thread above it sets `exceeded` and calls
    ``on_limit(current_gb)`` once, in the sampling thread (kill the process there, say). The
    last sample of `stop` only counts toward the peak: `exceeded` is True exactly when
    ``on_limit`` was called. The thread ends by itself when the process is gone.

    With ``include_children`` the descendants of the process count too; ``members`` (a
    function listing pids, such as the processes of a cgroup) counts those instead. The
    process itself is always counted, and its end ends the sampling.

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
        members: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"MemorySampler: interval_s must be > 0, got {interval_s!r}")
        if limit_gb is not None and not limit_gb > 0:
            raise ValueError(f"MemorySampler: limit_gb must be > 0 or None, got {limit_gb!r}")
        self.pid = pid
        self.interval_s = interval_s
        self.include_children = include_children
        self._members = members
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

    def _measure(self) -> int | None:
        """Anonymous bytes of the process and what counts with it; None once it is gone."""
        if self._members is None:
            return anon_memory_bytes(self.pid, self.include_children)
        own = own_anon_bytes(self.pid)
        if own is None:
            return None
        return own + anon_bytes_of(p for p in self._members() if p != self.pid)

    def _sample(self) -> int | None:
        """One reading, folded into the peak; None once the process is gone."""
        current = self._measure()
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
