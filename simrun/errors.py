"""The one base class of simrun's exceptions."""


class SimrunError(Exception):
    """Any error simrun raises on purpose: catch it to catch them all. Each subclass keeps
    the builtin base it had (`ValueError`, `LookupError`, ...) for callers that catch those."""
