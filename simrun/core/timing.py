"""The timing defaults (seconds) the service and the workers must agree on: the heartbeat
interval and time to live, and the grace period of a stop."""

from __future__ import annotations

HEARTBEAT_S = 2.0
HEARTBEAT_TTL_S = 8.0
#: The heartbeat TTL as a multiple of the interval, kept when only the interval is given.
TTL_PER_INTERVAL = HEARTBEAT_TTL_S / HEARTBEAT_S
#: After a stop (SIGTERM to a worker, Ctrl-C in ``simrun run``), the seconds running units
#: get to finish before they are handed back: ``--grace-s`` of ``simrun worker`` and
#: ``simrun run`` (which passes its own to its workers).
DEFAULT_GRACE_S = 10.0
