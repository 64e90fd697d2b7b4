"""Worker reports for tests that record what a key used: a success of some worker processes'
peaks, and a kill for memory at a limit."""

from __future__ import annotations

from simrun.core.reports import WorkerReport


def success(*peaks_gb: float, seconds: float = 0.5, limit_gb: float = 8.0) -> WorkerReport:
    """A successful report of one unit per process, one peak per process."""
    return WorkerReport(
        peak_memory_gb=peaks_gb, seconds_per_unit=seconds, units=len(peaks_gb), limit_gb=limit_gb
    )


def killed(limit_gb: float) -> WorkerReport:
    """A report of a process killed for memory at ``limit_gb``."""
    return WorkerReport(
        peak_memory_gb=(limit_gb,), seconds_per_unit=None, units=1, limit_gb=limit_gb,
        killed_for_memory=True,
    )  # fmt: skip
