"""Redis as simrun uses it: key names, the units' current attempts, and `JobQueue`."""
