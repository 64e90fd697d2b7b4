"""Resources learned from the reports of workers (spec: ``resources``).

An observation is what one worker process of one report measured: its peak anonymous
memory and the seconds of a unit, filed under the task's `ResourceKey` (task type, model,
variant) with the size of the task's inputs. `ResourceStore.resolve` turns the latest
observations of a key into the request for its next task: the typical peak of the last
`WINDOW` successes (fitted to input size when sizes are known) times a margin that follows
the key's spread and sample count (at least `MARGIN`), capped by the plugin's hint until a
kill at the hint, and after a kill for memory at least `RETRY_FACTOR` times the killed
process's limit until a later observation of the key succeeds (`policy` says it in full;
`explain` says why for one key).

The parts: `keys` (the key and how a task's key is derived), `policy` (the pure decision),
`store` (the SQLite shell).
"""

from simrun.resources.keys import ResourceKey, resource_key
from simrun.resources.policy import MARGIN, RETRY_FACTOR, WINDOW, ResolvedResources
from simrun.resources.store import ResourceStore

__all__ = [
    "MARGIN",
    "RETRY_FACTOR",
    "WINDOW",
    "ResolvedResources",
    "ResourceKey",
    "ResourceStore",
    "resource_key",
]
