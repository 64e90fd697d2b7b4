"""`retry_on` matched against the exception types a worker process reported (the type a
unit raised and its bases, `exception_names`), not only the traceback's last line."""

from __future__ import annotations

import pytest

from simrun.core.states import (
    Limits,
    RetryRule,
    UnitRow,
    exception_matches,
    exception_names,
    unit_after_outcome,
)
from tests.support.keys import TEST_KEY


class Flaky(OSError):
    """A plugin's own error type, derived from OSError."""


def test_the_names_are_the_type_and_its_bases_qualified_without_object() -> None:
    """The failure report names the raised type first, then its bases, each as
    module.QualName; object is left out."""
    assert exception_names(FileNotFoundError) == (
        "builtins.FileNotFoundError",
        "builtins.OSError",
        "builtins.Exception",
        "builtins.BaseException",
    )
    assert exception_names(Flaky)[:2] == (f"{__name__}.Flaky", "builtins.OSError")


FNF = exception_names(FileNotFoundError)
FLAKY = exception_names(Flaky)


@pytest.mark.parametrize(
    ("retry_on", "raised", "matches"),
    [
        (("OSError",), FNF, True),  # a base by its bare name
        (("FileNotFoundError",), FNF, True),  # the type itself
        (("builtins.OSError",), FNF, True),  # a qualified name
        (("ValueError",), FNF, False),
        (("Flaky",), FLAKY, True),
        ((f"{__name__}.Flaky",), FLAKY, True),
        (("other.module.Flaky",), FLAKY, False),  # a qualified name must be the same
        (("OSError",), FLAKY, True),
        (("Exception",), FNF, True),
        (("OSError",), ("FileNotFoundError",), False),  # a bare name read from a traceback
        (("OSError",), (), False),
    ],
)
def test_retry_on_names_a_type_or_one_of_its_bases(
    retry_on: tuple[str, ...], raised: tuple[str, ...], matches: bool
) -> None:
    """A retry_on entry matches a reported name equal to it or whose last dotted part it
    is: `OSError` matches a FileNotFoundError (through its bases); a qualified entry
    matches that qualified type only."""
    assert exception_matches(retry_on, raised) is matches


def _after(rule: RetryRule, error: str, exceptions: tuple[str, ...]) -> str:
    unit = UnitRow("r", "t", 5, "chunk", "running", attempt=2, job_id="j")
    result = unit_after_outcome(
        unit, "failed", 2, error=error, worker="w", limit_gb=1.0, limits=Limits(),
        now_s=100.0, rule=rule, exceptions=exceptions,
    )  # fmt: skip
    assert result is not None
    return result.state


TRACEBACK = "Traceback ...\nFileNotFoundError: [Errno 2] no such file: 'x'\n"


@pytest.mark.parametrize(
    ("retry_on", "exceptions", "state"),
    [
        (("OSError",), FNF, "pending"),  # reported bases: retried
        (("OSError",), (), "failed"),  # without a report, the traceback's name only
        (("FileNotFoundError",), (), "pending"),  # ... which still matches itself
        (("KeyError",), FNF, "failed"),
        (("error",), FNF, "pending"),
    ],
)
def test_a_unit_is_retried_on_a_reported_base_type(
    retry_on: tuple[str, ...], exceptions: tuple[str, ...], state: str
) -> None:
    """The unit's next state uses the reported exception types when there are some (so
    `retry_on: [OSError]` retries a FileNotFoundError), else the type read from the
    traceback's last line (a report of an older worker)."""
    assert _after(RetryRule(retry_on=retry_on), TRACEBACK, exceptions) == state


def test_the_reported_types_travel_through_the_report_stream() -> None:
    """A report entry's exception names survive its stream fields; an entry without them
    reads as having none."""
    from simrun.core.reports import ReportEntry, WorkerReport

    entry = ReportEntry(
        job_id="j", run="r", task="t", kind="chunk", attempt=1, worker_id="w",
        outcomes={0: "failed", 1: "done"}, report=WorkerReport.empty(1.0), started=1.0,
        finished=2.0, errors={0: TRACEBACK}, exceptions={0: FNF},
    )  # fmt: skip
    fields = entry.to_fields(TEST_KEY)
    assert ReportEntry.from_fields(fields, TEST_KEY).exceptions == {0: FNF}
    without = entry.model_copy(update={"exceptions": {}}).to_fields(TEST_KEY)
    assert "exceptions" not in without
    assert ReportEntry.from_fields(without, TEST_KEY).exceptions == {}
