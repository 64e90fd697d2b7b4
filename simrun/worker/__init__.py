"""The computing side: measuring memory, reporting, and running units in worker processes."""

from simrun.worker.exec_cli import exec_main
from simrun.worker.report import WorkerReport
from simrun.worker.sampler import MemorySampler

__all__ = ["MemorySampler", "WorkerReport", "exec_main"]
