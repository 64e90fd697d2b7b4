"""Helpers the tests share: task types for the workers and the service (`tasks`,
`service_tasks`), harnesses that run them (`harness`, `service_harness`, `cli_harness`),
a private Redis server (`redis_server`), builders of what workers write (`heartbeats`),
Hypothesis example counts (`examples`),
and readings of what units did (`units`)."""

from pathlib import Path

#: The repository's root (the tests' working directory for child processes).
REPO = Path(__file__).resolve().parents[2]
