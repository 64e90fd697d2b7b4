"""Names: every Redis key and queue name of a simrun namespace, in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass

from simrun.core.sizing import QueueName
from simrun.core.wire import RUN_ID, PayloadError

DEFAULT_PREFIX = "simrun"
#: The name under which the worker registers its one arq job function.
JOB_FUNCTION = "simrun_job"

#: The characters a SCAN pattern gives a meaning to.
_GLOB = re.compile(r"[*?\[\]\\]")


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one simrun namespace (``prefix``, "simrun" by default)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.prefix or any(c.isspace() for c in self.prefix):
            raise PayloadError(f"key prefix {self.prefix!r} is empty or holds white space")

    def queue(self, name: str) -> str:
        """The arq queue (a sorted set) of logical queue ``name`` (a `QueueName`)."""
        return f"{self.prefix}:queue:{QueueName(name)}"

    @property
    def reports(self) -> str:
        """The stream every worker adds its `ReportEntry` to."""
        return f"{self.prefix}:reports"

    @property
    def dead_letters(self) -> str:
        """The stream of entries that could not be read (a report, a heartbeat, a job, an
        attempts hash), each with its reason and source: moved aside, never read again."""
        return f"{self.prefix}:dead-letters"

    @property
    def dead_letter_counts(self) -> str:
        """Hash of how many entries of each kind were moved to `dead_letters`."""
        return f"{self.prefix}:dead-letters:counts"

    @property
    def service_lock(self) -> str:
        """Who drives this namespace: one service at a time, its identity set with NX and
        an expiry, refreshed while it runs (`simrun.service.main.RedisClaim`)."""
        return f"{self.prefix}:service-lock"

    def worker(self, worker_id: str) -> str:
        """The heartbeat key of one worker container (expires unless refreshed)."""
        return f"{self.prefix}:worker:{worker_id}"

    @property
    def workers(self) -> str:
        """Sorted set of worker ids scored by their last heartbeat (unix seconds)."""
        return f"{self.prefix}:workers"

    def attempts(self, run: str, task: str) -> str:
        """Hash of the current attempt of each unit of a task (see `unit_field`)."""
        return f"{self.prefix}:attempts:{run}:{task}"

    def task_ended(self, run: str, task: str) -> str:
        """Set (with an expiry) when a task ended: workers remove its local scratch (``task``
        "*": every task of the run)."""
        return f"{self.prefix}:ended:{run}:{task}"

    @property
    def attempts_pattern(self) -> str:
        """The SCAN pattern of every attempts hash of this namespace."""
        escaped = _GLOB.sub(lambda m: "\\" + m.group(0), self.prefix)
        return f"{escaped}:attempts:*"

    def split_attempts(self, key: str) -> tuple[str, str]:
        """The run and the task of an attempts hash of this namespace (the run shaped as a
        `RUN_ID`, so a longer prefix's key is not taken for ours)."""
        head = f"{self.prefix}:attempts:"
        run, sep, task = key[len(head) :].partition(":")
        if not key.startswith(head) or not sep or not RUN_ID.fullmatch(run) or not task:
            raise PayloadError(f"{key!r} is not an attempts hash of namespace {self.prefix!r}")
        return run, task

    def arq_job_id(self, job_id: str) -> str:
        """The id arq stores a job under; arq's own keys are global, so it carries the prefix."""
        return f"{self.prefix}:{job_id}"

    def job_id_from_arq(self, arq_id: str) -> str:
        """The simrun job id of an arq job id of this namespace."""
        head = f"{self.prefix}:"
        if not arq_id.startswith(head):
            raise PayloadError(f"arq job id {arq_id!r} is not of namespace {self.prefix!r}")
        return arq_id[len(head) :]
