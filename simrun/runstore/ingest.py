"""How a batch of reports is written, decided without I/O.

Most reports say that every unit of their job is done. `simrun.core.states.unit_after_outcome`
takes ``done`` whatever the unit's state (a unit already done ignores it, and a unit queued
or running under another attempt leaves it to that attempt), so such a report is one
set-based UPDATE of its units' index ranges whose WHERE clause says the same: no unit is
read, no row object made. Every other report goes unit
by unit through `unit_after_outcome`. Reports of one batch apply in their order; a report
that is all done but shares a unit with a report that goes unit by unit goes unit by unit
too, so that the order between the two stays as it was.
"""

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
    """The entries written as set-based updates, and those written unit by unit (each list
    in the batch's order). All-done entries go set-based unless they share a unit with an
    entry that goes unit by unit (a report that is not all done, or, in turn, an all-done
    one that shares a unit with such a report)."""
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
    """The largest peak memory of a worker process that a report measured for its task, or
    None when it tells nothing of what the task needs: a merge, a job killed for memory
    (its peak is cut at its limit), or one whose units never ran."""
    report = entry.report
    killed = report.killed_for_memory or any(o == "killed" for o in entry.outcomes.values())
    if entry.kind == "merge" or killed or report.units <= 0 or not report.peak_memory_gb:
        return None
    return max(report.peak_memory_gb)
