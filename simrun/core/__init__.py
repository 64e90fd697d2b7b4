"""The neutral core: the wire, the pure rules and the places that the service and the
workers share. It imports nothing of simrun but `simrun.plugins`."""
