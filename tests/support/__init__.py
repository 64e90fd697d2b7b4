"""Task types for the worker's tests and benchmarks (loaded with ``--plugins``, never
installed as entry points)."""
