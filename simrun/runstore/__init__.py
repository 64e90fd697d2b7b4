"""Runs, tasks, units and jobs in flight in the service's SQLite file: the only SQL about
run state. Writes go through one connection under a lock (`RunStore`), reads through a
second one that WAL lets see the last commit (`RunReads`); a unit without a state of its
own has no row (`simrun.core.ranges`: its task's frontier, a range job or a span)."""
