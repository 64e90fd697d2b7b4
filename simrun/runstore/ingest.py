"""Which reports of a batch are one set-based update of their units' ranges (all done:
`unit_after_outcome` takes ``done`` whatever the unit's state) and which go unit by unit,
decided without I/O; the batch's order between units is kept."""

from __future__ import annotations

from collections.abc import Sequence

from simrun.core.reports import ReportEntry
from simrun.core.states import unit_index


def all_done(entry: ReportEntry) -> bool:
    """Whether a report names at least one unit and says every one is done."""
    return bool(entry.outcomes) and all(o == "done" for o in entry.outcomes.values())


def _units(entry: ReportEntry) -> set[tuple[str, str, int]]:
    return {(entry.run, entry.task, unit_index(key)) for key in entry.outcomes}


def split_reports(
    entries: Sequence[ReportEntry],
) -> tuple[list[ReportEntry], list[ReportEntry]]:
    """The entries written as set-based updates, and those written unit by unit, each in
    the batch's order: all-done entries go set-based unless they share a unit with one that
    goes unit by unit (in turn)."""
    slow_at = {i for i, e in enumerate(entries) if not all_done(e)}
    named: set[tuple[str, str, int]] = set()
    for i in slow_at:
        named |= _units(entries[i])
    grew = bool(named)
    while grew:
        grew = False
        for i, entry in enumerate(entries):
            if i not in slow_at and not named.isdisjoint(units := _units(entry)):
                slow_at.add(i)
                named |= units
                grew = True
    fast = [e for i, e in enumerate(entries) if i not in slow_at]
    slow = [e for i, e in enumerate(entries) if i in slow_at]
    return fast, slow


def observed_peak_gb(entry: ReportEntry) -> float | None:
    """The largest peak memory of a worker process a report measured, or None when it tells
    nothing of what the task needs (a merge, a kill for memory, no unit ran)."""
    report = entry.report
    killed = report.killed_for_memory or any(o == "killed" for o in entry.outcomes.values())
    if entry.kind == "merge" or killed or report.units <= 0 or not report.peak_memory_gb:
        return None
    return max(report.peak_memory_gb)
