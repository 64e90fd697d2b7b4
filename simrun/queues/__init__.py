"""Everything the service and the workers agree on in Redis, in one module.

* **Keys**: every Redis key and queue name, derived from one namespace prefix (`Keys`), so
  that several simrun installations (or tests) share one Redis without seeing each other.
* **Jobs**: the payload of a job (`JobSpec`), its deterministic id, the queue it belongs
  on (`queue_for`), and the serializer arq uses for jobs and results: msgpack, never
  pickle, and a pickled payload is refused before anything of it is executed.
* **Reports**: the entry a worker adds to the report stream for every job (`ReportEntry`).
* **Attempts**: the per-unit current attempt the service writes when it dispatches, which
  a worker reads to skip units that were dispatched again since (`current_attempts`); the
  service deletes a run's hashes once no job of it is left (`forget_attempts`).
* **JobQueue**: the thin layer over arq the service uses to enqueue, watch queues (and
  which jobs arq holds in progress), drop jobs, list live workers and read reports. arq is
  imported here and in the worker's setup only.

The wire formats are described on `JobSpec.to_dict` and `ReportEntry.to_fields`.
"""

from simrun.queues.client import (
    JobQueue,
    attempts_by_run,
    current_attempts,
    forget_attempts,
    set_current_attempts,
)
from simrun.queues.keys import (
    DEFAULT_PREFIX,
    JOB_FUNCTION,
    JOB_KINDS,
    OUTCOMES,
    RUN_ID,
    JobKind,
    Keys,
    Outcome,
    PayloadError,
    UnitKey,
    image_queue,
    job_id,
    unit_field,
)
from simrun.queues.payload import (
    JobPaths,
    JobResources,
    JobSpec,
    deserialize,
    queue_for,
    serialize,
)
from simrun.queues.reports import ReportEntry, StreamReport, WorkerInfo, now_s

__all__ = [
    "DEFAULT_PREFIX",
    "JOB_FUNCTION",
    "JOB_KINDS",
    "OUTCOMES",
    "RUN_ID",
    "JobKind",
    "JobPaths",
    "JobQueue",
    "JobResources",
    "JobSpec",
    "Keys",
    "Outcome",
    "PayloadError",
    "ReportEntry",
    "StreamReport",
    "UnitKey",
    "WorkerInfo",
    "attempts_by_run",
    "current_attempts",
    "deserialize",
    "forget_attempts",
    "image_queue",
    "job_id",
    "now_s",
    "queue_for",
    "serialize",
    "set_current_attempts",
    "unit_field",
]
