"""The timing defaults (seconds) the service and the workers must agree on: the heartbeat
interval and time to live, and the grace period of a stop."""

from __future__ import annotations

HEARTBEAT_S = 2.0
HEARTBEAT_TTL_S = 8.0
#: The heartbeat TTL as a multiple of the interval, kept when only the interval is given.
TTL_PER_INTERVAL = HEARTBEAT_TTL_S / HEARTBEAT_S
#: Seconds running units get to finish after a stop before they are handed back
#: (``--grace-s``).
DEFAULT_GRACE_S = 10.0
