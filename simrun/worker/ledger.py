"""The outcome of each unit of one job (exactly one each) and the `WorkerReport` made from
them. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from simrun.core.reports import WorkerReport
from simrun.core.wire import Outcome, UnitKey

_DEATH_OUTCOMES: dict[str, Outcome] = {"memory": "killed", "timeout": "timeout", "stop": "not_run"}


def death_outcome(kill_reason: str | None) -> Outcome:
    """The outcome of the unit whose process ended under it: killed (for memory), timeout,
    not_run (killed because the worker stops), else failed (it crashed on its own)."""
    return _DEATH_OUTCOMES.get(kill_reason or "", "failed")


class Ledger:
    """The outcome, error and seconds of each unit of one job."""

    def __init__(self, units: Sequence[UnitKey]) -> None:
        if len(set(units)) != len(units):
            raise ValueError(f"a unit is listed twice in {list(units)}")
        self.units = tuple(units)
        self._members = frozenset(self.units)
        self.outcomes: dict[UnitKey, Outcome] = {}
        self.errors: dict[UnitKey, str] = {}
        #: The exception types a failed unit raised (`simrun.core.states.exception_names`).
        self.exceptions: dict[UnitKey, tuple[str, ...]] = {}
        self.seconds: dict[UnitKey, float] = {}

    def record(
        self,
        unit: UnitKey,
        outcome: Outcome,
        *,
        seconds: float | None = None,
        error: str | None = None,
        exceptions: tuple[str, ...] = (),
    ) -> None:
        """The outcome of ``unit``, once (``exceptions``: the types a failed unit raised, its
        own first)."""
        if unit not in self._members:
            raise KeyError(f"unit {unit!r} is not part of this job")
        if unit in self.outcomes:
            raise ValueError(f"unit {unit!r} already ended as {self.outcomes[unit]!r}")
        self.outcomes[unit] = outcome
        if error:
            self.errors[unit] = error
        if exceptions and outcome != "done":
            self.exceptions[unit] = exceptions
        if outcome == "done" and seconds is not None:
            self.seconds[unit] = seconds

    @property
    def pending(self) -> list[UnitKey]:
        """Units without an outcome yet."""
        return [u for u in self.units if u not in self.outcomes]

    def close_rest(
        self,
        outcome: Outcome = "not_run",
        error: str | None = None,
        exceptions: tuple[str, ...] = (),
    ) -> None:
        """Give every unit without an outcome this one."""
        for unit in self.pending:
            self.record(unit, outcome, error=error, exceptions=exceptions)

    def report(
        self, peaks_gb: Sequence[float], limit_gb: float, killed_for_memory: bool
    ) -> WorkerReport:
        """The measurements of the job."""
        seconds = list(self.seconds.values())
        return WorkerReport(
            peak_memory_gb=tuple(peaks_gb),
            seconds_per_unit=sum(seconds) / len(seconds) if seconds else None,
            units=sum(1 for o in self.outcomes.values() if o == "done"),
            limit_gb=limit_gb,
            killed_for_memory=killed_for_memory,
        )
