"""`MemorySampler`: the anonymous resident memory (``RssAnon``) of a process, with its tree
or its cgroup, sampled in a daemon thread: the peak, and a callback once past a limit."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable

from simrun.core.sizing import GIB
from simrun.worker.proctree import anon_bytes_of, anon_memory_bytes, own_anon_bytes

log = logging.getLogger(__name__)


class MemorySampler:
    """The peak anonymous memory of ``pid`` (with its descendants, or ``members()``) sampled
    every ``interval_s``; the first sample above ``limit_gb`` calls ``on_limit(current_gb)``."""

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
        self._limit_bytes = math.inf if limit_gb is None else limit_gb * GIB
        self._on_limit = on_limit
        self._lock = threading.Lock()
        self._peak_bytes = 0
        self._exceeded = False
        self._gone = False
        self._samples = 0
        self._cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
            while (current := self._sample()) is not None:
                if current > self._limit_bytes and not self._exceeded:
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

    def start(self) -> MemorySampler:
        """Start sampling in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError(f"the memory sampler of pid {self.pid} was already started")
        self._thread = threading.Thread(
            target=self._run, name=f"memory-sampler-{self.pid}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop the thread and take a last sample; the peak in GiB."""
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

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def peak_gb(self) -> float:
        """The highest anonymous memory seen (GiB)."""
        with self._lock:
            return self._peak_bytes / GIB

    @property
    def exceeded(self) -> bool:
        """Whether a sample went above ``limit_gb``."""
        return self._exceeded

    @property
    def samples(self) -> int:
        with self._lock:
            return self._samples

    @property
    def cpu_s(self) -> float:
        """CPU seconds the sampling thread used, once it ended."""
        return self._cpu_s
