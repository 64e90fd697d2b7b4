"""Runs, tasks, units and jobs in flight in the service's SQLite file, the only SQL about run
state: writes through one connection under a lock (`RunStore`), reads through a second
(`RunReads`); a unit with no state of its own has no row (`simrun.core.ranges`)."""
