"""Resources learned from the reports of workers (spec: ``resources``): `keys` (what
observations are grouped by), `policy` (the pure decision), `store` (the SQLite shell)."""

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
