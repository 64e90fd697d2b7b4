"""The field types of the wire models (`simrun.core.wire`): one rule for "a finite number
>= 0" wherever the service, the workers and simrun-exec read a number."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.reports import WorkerReport
from simrun.core.wire import FiniteNonNeg, PayloadError, is_finite_nonneg
from simrun.plugins import TaskPaths

FINITE_NONNEG: TypeAdapter[float] = TypeAdapter(FiniteNonNeg)

# (value, accepted)
CASES: list[tuple[object, bool]] = [
    (True, False),
    (False, False),
    (math.nan, False),
    (math.inf, False),
    (-math.inf, False),
    (-1, False),
    (-0.5, False),
    ("1", False),
    (None, False),
    (0, True),
    (0.0, True),
    (1.5, True),
    (7, True),
]


@pytest.mark.parametrize(("value", "accepted"), CASES)
def test_finite_nonneg_accepts_exactly_finite_numbers_at_least_zero(
    value: object, accepted: bool
) -> None:
    """A bool, NaN, an infinity, a negative number or a string is not a finite number >= 0;
    0, 1.5 and an int are (an int is read as a float). `is_finite_nonneg` says the same."""
    assert is_finite_nonneg(value) is accepted
    if accepted:
        got = FINITE_NONNEG.validate_python(value)
        assert isinstance(got, float)
        assert got == value
    else:
        with pytest.raises(ValidationError):
            FINITE_NONNEG.validate_python(value)


@pytest.mark.parametrize(("value", "accepted"), CASES)
def test_the_wire_models_use_the_one_rule(value: object, accepted: bool) -> None:
    """The job payload's resources and a worker report accept and refuse the same values;
    a refused payload names the field and the value."""
    payload = {"memory_base_gb": 1.0, "memory_per_worker_gb": value}
    report = {"peak_memory_gb": [], "seconds_per_unit": None, "units": 0, "limit_gb": value}
    if accepted:
        assert JobResources.model_validate(payload).memory_per_worker_gb == value
        assert WorkerReport.from_dict(report).limit_gb == value
        return
    with pytest.raises(ValidationError):
        JobResources.model_validate(payload)
    with pytest.raises(ValueError, match=r"field 'limit_gb' must be a finite number >= 0, got"):
        WorkerReport.from_dict(report)


def test_a_payload_error_names_place_field_rule_and_value() -> None:
    """A ValidationError of a job payload becomes a PayloadError (a ValueError) saying the
    place, the field, the rule and the value."""
    spec = JobSpec(
        kind="merge",
        run="r",
        task="t",
        task_type="x",
        settings={},
        paths=JobPaths.of(TaskPaths.for_task(Path("/s"), "r", "t")),
        resources=JobResources(memory_base_gb=1.0, memory_per_worker_gb=2.0),
    )
    data = spec.to_dict()
    data["resources"]["memory_base_gb"] = True
    with pytest.raises(PayloadError) as info:
        JobSpec.from_dict(data)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == (
        "job payload: resources: field 'memory_base_gb' must be a finite number >= 0, got True"
    )
