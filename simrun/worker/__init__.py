"""The computing side: measuring memory, reporting, and running units in worker processes."""

from simrun.core.reports import WorkerReport
from simrun.worker.exec.main import exec_main
from simrun.worker.sampler import MemorySampler

__all__ = ["MemorySampler", "WorkerReport", "exec_main"]
