"""The configuration every process shares: its environment variables and defaults.

Only the entry points read the environment (click's ``envvar=``) and pass values down.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

#: Redis of the service and the workers when ``--redis-url`` / ``REDIS_URL`` gives none.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: The service the client commands talk to when ``--url`` / ``SIMRUN_URL`` gives none.
DEFAULT_URL = "http://127.0.0.1:8765"
#: The run store when ``--store`` / ``SIMRUN_STORE`` gives none.
DEFAULT_STORE = Path("simrun-store")

ENV_REDIS_URL = "REDIS_URL"
ENV_URL = "SIMRUN_URL"
ENV_TOKEN = "SIMRUN_TOKEN"
ENV_STORE = "SIMRUN_STORE"
#: The service's SQLite file, apart from the store (which workers share, often over NFS).
ENV_DB = "SIMRUN_DB"
#: The container engine (docker, podman, or a path) that runs commands of tasks with an image
#: on one machine (`simrun.worker.engine`).
ENV_ENGINE = "SIMRUN_ENGINE"
#: The environment image of a run whose workflow names none (``simrun service``).
ENV_ENVIRONMENT_IMAGE = "SIMRUN_ENVIRONMENT_IMAGE"
#: The worker's local directory (status file, reports kept while Redis is away).
ENV_WORKER_DIR = "SIMRUN_WORKER_DIR"
#: The worker's local directory of the tasks' scratch and staged inputs.
ENV_SCRATCH_DIR = "SIMRUN_SCRATCH_DIR"

#: The limits of what a client may ask of the service (`simrun.core.intake.InputLimits`,
#: whose defaults they override): field -> environment variable (and option ``--field``).
INTAKE_ENV = {
    "max_request_bytes": "SIMRUN_MAX_REQUEST_BYTES",
    "max_workflow_bytes": "SIMRUN_MAX_WORKFLOW_BYTES",
    "max_file_bytes": "SIMRUN_MAX_FILE_BYTES",
    "max_files": "SIMRUN_MAX_FILES",
    "max_depth": "SIMRUN_MAX_DEPTH",
    "max_tasks": "SIMRUN_MAX_TASKS",
    "max_units_per_task": "SIMRUN_MAX_UNITS_PER_TASK",
    "max_units_per_run": "SIMRUN_MAX_UNITS_PER_RUN",
    "count_timeout_s": "SIMRUN_COUNT_TIMEOUT_S",
}


def redact_url(url: str) -> str:
    """``url`` without its password, for messages (``redis://user:***@host:6379/0``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return parts._replace(netloc=user + netloc).geturl()
