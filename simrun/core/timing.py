"""The timing defaults the service and the workers must agree on (seconds).

A worker container writes its heartbeat every `HEARTBEAT_S` under a key that lives
`HEARTBEAT_TTL_S`; the service takes a worker whose key expired for dead and dispatches its
units again, and gives up a job arq holds in progress that no live worker lists for longer
than one TTL. Both sides read these defaults from here; ``simrun worker --heartbeat-s`` and
``simrun service --heartbeat-ttl-s`` change them per deployment.
"""

from __future__ import annotations

HEARTBEAT_S = 2.0
HEARTBEAT_TTL_S = 8.0
#: The heartbeat TTL as a multiple of the interval, kept when only the interval is given.
TTL_PER_INTERVAL = HEARTBEAT_TTL_S / HEARTBEAT_S
#: After a stop (SIGTERM to a worker, Ctrl-C in ``simrun run``), the seconds running units
#: get to finish before they are handed back: ``--grace-s`` of ``simrun worker`` and
#: ``simrun run`` (which passes its own to its workers).
DEFAULT_GRACE_S = 10.0
