"""Resources learned from the reports of workers (spec: ``resources``).

An observation is what one worker process of one report measured: its peak anonymous
memory and the seconds of a unit, filed under the task's `ResourceKey` (task type, model,
variant). `ResourceStore.resolve` turns the latest observations of a key into the request
for its next task: the 95th percentile (nearest rank) of the last `WINDOW` successful
observations times `MARGIN`, and after a kill for memory at least `RETRY_FACTOR` times the
killed process's limit until a later observation of the key succeeds; a learned request
is never below `MIN_MEMORY_PER_WORKER_GB`.

The parts: `keys` (the key and how a task's key is derived), `policy` (the pure decision),
`store` (the SQLite shell).
"""

from simrun.resources.keys import ResourceKey, resource_key
from simrun.resources.policy import (
    MARGIN,
    MIN_MEMORY_PER_WORKER_GB,
    PERCENTILE,
    PERCENTILE_METHOD,
    RETRY_FACTOR,
    WINDOW,
    Learned,
    Observation,
    ResolvedResources,
    decide,
    learn,
    percentile,
)
from simrun.resources.store import KeySummary, Record, ResourceStore

__all__ = [
    "MARGIN",
    "MIN_MEMORY_PER_WORKER_GB",
    "PERCENTILE",
    "PERCENTILE_METHOD",
    "RETRY_FACTOR",
    "WINDOW",
    "KeySummary",
    "Learned",
    "Observation",
    "Record",
    "ResolvedResources",
    "ResourceKey",
    "ResourceStore",
    "decide",
    "learn",
    "percentile",
    "resource_key",
]
