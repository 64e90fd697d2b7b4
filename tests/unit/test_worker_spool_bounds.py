"""Where a report the worker could not write goes (simrun.worker.spool.SpoolBounds.admit), on
a table of cases."""

from __future__ import annotations

import pytest

from simrun.worker.spool import SpoolBounds

BOUNDS = SpoolBounds(memory_bytes=100, disk_bytes=1000)


@pytest.mark.parametrize(
    ("size", "in_memory", "on_disk", "place"),
    [
        (10, 0, 0, "memory"),  # empty spool
        (10, 90, 0, "memory"),  # exactly fills memory
        (11, 90, 0, "disk"),  # past the memory bound: spilled to disk
        (150, 0, 0, "disk"),  # larger than memory alone
        (10, 0, 5, "disk"),  # something waits on disk: never jump ahead of it
        (10, 50, 990, "disk"),  # exactly fills the disk
        (11, 50, 990, "drop"),  # past both bounds
        (2000, 0, 0, "drop"),  # larger than both
    ],
)
def test_admit(size: int, in_memory: int, on_disk: int, place: str) -> None:
    """A report goes to memory while it fits and nothing waits on disk, else to disk while
    it fits, else is dropped (both bounds reached)."""
    assert BOUNDS.admit(size, in_memory, on_disk) == place


def test_nothing_fits_a_zero_disk_bound() -> None:
    """With no disk allowed, what memory cannot take is dropped."""
    assert SpoolBounds(memory_bytes=10, disk_bytes=0).admit(11, 0, 0) == "drop"
