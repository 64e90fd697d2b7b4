"""Redis as simrun uses it: key names (`Keys`), the units' current attempts, and `JobQueue`,
the thin layer over arq the service uses.
"""
