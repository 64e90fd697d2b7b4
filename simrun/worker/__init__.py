"""The computing side: measuring memory, reporting, and running units in worker processes."""

from simrun.worker.report import WorkerReport

__all__ = ["WorkerReport"]
