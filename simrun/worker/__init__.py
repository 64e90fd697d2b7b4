"""The computing side: a worker container (`container`) takes jobs from its queues
(`jobs`), admits them by memory (`admission`, within its `capacity`), runs chunks and
merges on its pool of worker processes (`pool`) and commands through ``simrun-exec``
(`command`, `exec`), measures them (`sampler`, `ledger`) and reports; `heartbeat` tells the
service it is alive and `health` is the container's health check."""

from simrun.core.reports import WorkerReport
from simrun.worker.exec.main import exec_main
from simrun.worker.sampler import MemorySampler

__all__ = ["MemorySampler", "WorkerReport", "exec_main"]
