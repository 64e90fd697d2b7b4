"""The pure decision of simrun.resources.policy: percentiles, learn and decide, by tables
and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simrun.plugins import ResourceHint
from simrun.resources import MARGIN, RETRY_FACTOR, WINDOW, ResolvedResources
from simrun.resources.policy import (
    CEILING_FACTOR,
    KILL_Z,
    MIN_MEMORY_PER_WORKER_GB,
    PRIOR_SPREAD,
    Observation,
    decide,
    explain,
    learn,
    percentile,
)
from simrun.workflow import ResourceOverride
from tests.support.examples import examples

HINT = ResourceHint(memory_base_gb=1.5, memory_per_worker_gb=3.0, scratch_gb=10.0, gpus=1)
# Small, exact constants for the tables: window 4, margin 1.25, retry factor 2.
SMALL = {"window": 4, "margin": 1.25, "retry_factor": 2.0}


def ok(gb: float, seconds: float | None = None, run: str = "r1") -> Observation:
    return Observation(gb, False, seconds, run)


def kill(limit_gb: float, run: str = "r1") -> Observation:
    return Observation(limit_gb, True, None, run)


# -- percentile ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "method", "expected"),
    [
        ([7.0], 95, "nearest-rank", 7.0),
        ([7.0], 95, "linear", 7.0),
        ([1.0, 2.0, 3.0], 95, "nearest-rank", 3.0),  # fewer than 20 values: the maximum
        ([float(i) for i in range(1, 21)], 95, "nearest-rank", 19.0),  # ceil(19.0) = 19th
        ([float(i) for i in range(1, 22)], 95, "nearest-rank", 20.0),  # ceil(19.95) = 20th
        # 0.95 * 60 is 57.000000000000007 in floats; the exact rank is 57
        ([float(i) for i in range(1, 61)], 95, "nearest-rank", 57.0),
        ([4.0, 1.0, 3.0, 2.0], 50, "nearest-rank", 2.0),  # order of the input is irrelevant
        ([1.0, 2.0, 3.0, 4.0], 50, "linear", 2.5),
        ([1.0, 2.0, 3.0, 4.0], 100, "linear", 4.0),
        ([float(i) for i in range(1, 21)], 95, "linear", 19.05),
    ],
)
def test_percentile_table(values: list[float], q: float, method: str, expected: float) -> None:
    """Nearest rank is the ceil(q n / 100)-th smallest value, computed exactly; linear
    interpolates between neighbouring ranks."""
    assert percentile(values, q, method) == pytest.approx(expected)  # type: ignore[arg-type]


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=300))
def test_nearest_rank_is_an_observed_value_matching_numpy(values: list[float]) -> None:
    """The nearest-rank P95 is always one of the observations, and agrees with numpy's
    inverted_cdf method."""
    got = percentile(values, 95)
    assert got in values
    assert got == float(np.percentile(np.array(values), 95, method="inverted_cdf"))


@pytest.mark.parametrize(
    ("values", "q", "method", "message"),
    [
        ([], 95, "nearest-rank", "no values"),
        ([1.0], 0, "nearest-rank", r"q must be in \(0, 100\]"),
        ([1.0], 101, "linear", r"q must be in \(0, 100\]"),
        ([1.0], 95, "cubic", "unknown method 'cubic'"),
    ],
)
def test_percentile_refuses_bad_input(
    values: list[float], q: float, method: str, message: str
) -> None:
    """Bad percentile arguments are refused with an error saying which."""
    with pytest.raises(ValueError, match=message):
        percentile(values, q, method)  # type: ignore[arg-type]


# -- decide: the rules as sequences of reports -----------------------------------------------

ONE_RUN = "learned from 1 run"
NO_CAP = ResourceHint(memory_base_gb=1.5, scratch_gb=10.0, gpus=1)  # the default hint's memory


def margin_for(peaks: list[float]) -> float:
    """The margin the module docstring describes, for steady peaks without input sizes."""
    logs = [math.log(p) for p in peaks]
    n = len(logs)
    mean = sum(logs) / n
    spread2 = (PRIOR_SPREAD**2 + sum((y - mean) ** 2 for y in logs)) / n
    by_spread = KILL_Z * math.sqrt(spread2 * (1 + 1 / n))
    covered = percentile([y - mean for y in logs], 95) + math.log(MARGIN)
    if n >= 20:  # never past the v1 rule, P95 x 1.4
        by_spread = min(by_spread, covered - math.log(MARGIN) + math.log(CEILING_FACTOR))
    return math.exp(max(by_spread, covered, math.log(MARGIN)))


@pytest.mark.parametrize(
    "peaks",
    [[2.0], [2.0, 2.0], [1.0, 3.0], [2.0] * 200, [1.0, 1.1, 0.9, 1.05] * 10, [1.0] * 19 + [9.0]],
)
def test_the_request_is_the_typical_peak_times_the_margin(peaks: list[float]) -> None:
    """Without a cap: the geometric mean of the window's peaks times exp(KILL_Z x the
    predictive spread), at least MARGIN and at least what covers the top 5 % of the peaks."""
    got = explain([ok(p) for p in peaks], NO_CAP)
    center = math.exp(sum(math.log(p) for p in peaks) / len(peaks))
    assert got.center_gb == pytest.approx(center)
    assert got.margin == pytest.approx(margin_for(peaks))
    assert got.requested_gb == pytest.approx(max(center * margin_for(peaks), 0.25))
    assert not got.hint_capped
    assert got.input_slope is None


def test_the_margin_follows_the_spread_and_the_samples() -> None:
    """A key seen once gets a wide margin; 200 identical peaks get the least (MARGIN); a
    noisy key gets more than a steady one with as many samples."""
    once = explain([ok(4.0)], NO_CAP).margin
    steady = explain([ok(4.0)] * 200, NO_CAP).margin
    noisy = explain([ok(4.0 * (1.2 if i % 2 else 0.85)) for i in range(200)], NO_CAP).margin
    assert once is not None
    assert steady is not None
    assert noisy is not None
    assert steady == pytest.approx(MARGIN)
    assert once > noisy > 1.3 > steady


@pytest.mark.parametrize(
    ("history", "memory_gb", "capped"),
    [
        pytest.param([ok(2.0)], 3.0, True, id="learned above the hint: the hint"),
        pytest.param([ok(1.0)] * 200, 1.05, False, id="learned below the hint"),
        pytest.param([kill(3.0), ok(5.0)], 6.0, True, id="a kill at the hint lifts the cap"),
        pytest.param([kill(1.0), ok(2.0)], 3.0, True, id="a kill below the hint does not"),
        pytest.param([ok(2.0), kill(3.0)], 6.0, False, id="the kill floor wins over the cap"),
    ],
)
def test_the_hint_caps_until_a_kill_at_the_hint(
    history: list[Observation], memory_gb: float, capped: bool
) -> None:
    """A type's hint bounds a learned request until a unit killed at (or above) the hint
    shows it too small; then the bound is RETRY_FACTOR x that kill (or the largest peak x
    MARGIN); the pending-kill floor is applied after the cap."""
    got = explain(history, HINT)
    assert got.requested_gb == pytest.approx(memory_gb)
    assert got.hint_capped is capped
    assert any("cap" in r for r in got.reasons) is capped


@pytest.mark.parametrize(
    ("history", "memory_gb", "samples", "source"),
    [
        pytest.param([], 3.0, 0, "plugin hint", id="nothing learned: the hint"),
        pytest.param([kill(3.0)], 6.0, 1, ONE_RUN, id="kill: retry factor x limit"),
        pytest.param([kill(1.0)], 3.0, 1, ONE_RUN, id="kill below hint: the hint"),
        pytest.param([kill(3.0), kill(6.0)], 12.0, 2, ONE_RUN, id="kill, kill"),
        pytest.param([ok(2.0), kill(4.0)], 8.0, 2, ONE_RUN, id="kill after success: floor"),
        pytest.param([ok(2.0), kill(4.0), kill(2.0)], 8.0, 3, ONE_RUN, id="largest kill counts"),
        pytest.param(
            [ok(1.0, run="a"), ok(1.0, run="b"), kill(2.0, run="c")],
            4.0,
            3,
            "learned from 3 runs",
            id="runs are counted over what is used",
        ),
    ],
)
def test_decide_rules(
    history: list[Observation], memory_gb: float, samples: int, source: str
) -> None:
    """After kills the request is at least RETRY_FACTOR x the largest limit killed since
    the last success (the hint when nothing succeeded yet, if higher); the hint when
    nothing is known; samples and runs count the window and the pending kills."""
    got = decide(history, HINT, None)
    assert got.memory_per_worker_gb == pytest.approx(memory_gb)
    assert got.samples == samples
    assert got.source == source
    # base memory, scratch and GPUs are never learned: the hint's
    assert (got.memory_base_gb, got.scratch_gb, got.gpus) == (1.5, 10.0, 1)


def test_a_success_ends_the_floor_and_old_peaks_leave_the_window() -> None:
    """A success after a kill ends the kill floor; only the last WINDOW successes count."""
    after = decide([ok(2.0), kill(4.0), ok(2.0)], NO_CAP, None, window=4)
    assert after.memory_per_worker_gb < 8.0
    old = decide([ok(50.0), *[ok(1.0)] * 4], NO_CAP, None, window=4)
    assert old.memory_per_worker_gb == pytest.approx(margin_for([1.0] * 4))


def test_memory_follows_the_input_size() -> None:
    """With input sizes known, a key whose peaks grow linearly with input asks more for a
    larger input and less for a smaller one, with an exponent near 1, and a margin near
    MARGIN once many sizes are known."""
    history = [
        Observation(0.5 * i, seconds_per_unit=1.0, run="r", input_bytes=i * 10**9)
        for i in range(1, 41)
    ]
    small = explain(history, NO_CAP, input_bytes=2 * 10**9)
    large = explain(history, NO_CAP, input_bytes=40 * 10**9)
    assert large.input_slope == pytest.approx(1.0, abs=0.02)
    assert small.center_gb == pytest.approx(1.0, rel=0.02)
    assert large.center_gb == pytest.approx(20.0, rel=0.02)
    assert large.requested_gb < 20.0 * 1.25
    assert 1.0 <= small.requested_gb < 1.25
    # a size never seen: the fit widens the margin away from the sizes it knows
    far = explain(history, NO_CAP, input_bytes=4000 * 10**9)
    assert far.margin is not None
    assert large.margin is not None
    assert far.margin > large.margin
    # without the task's size the sizes are not used
    assert explain(history, NO_CAP).input_slope is None


def test_a_few_sizes_lean_on_the_prior_slope() -> None:
    """With one known size the exponent is the prior's (0.5), and a larger input still
    asks for more than the peak seen."""
    got = explain([Observation(2.0, input_bytes=10**9)], NO_CAP, input_bytes=4 * 10**9)
    assert got.input_slope == pytest.approx(0.5)
    assert got.center_gb == pytest.approx(4.0)
    assert got.requested_gb > 4.0


def test_the_explanation_names_each_part() -> None:
    """reasons says the typical peak, the margin and the spread with the sample count, the
    cap and the kill floor when they decide."""
    got = explain([ok(2.0), ok(2.2), ok(1.9), kill(3.0)], HINT)
    text = " / ".join(got.reasons)
    assert "typical peak" in text
    assert "margin" in text
    assert "3 samples" in text
    assert "raised to 6 GiB" in text
    assert got.kill_floor_gb == pytest.approx(6.0)


def test_the_module_constants_are_the_defaults() -> None:
    """The documented constants: WINDOW 200, MARGIN 1.05, RETRY_FACTOR 2, KILL_Z the 99 %
    point, a prior spread of 0.25; decide reads at most WINDOW successes."""
    assert (WINDOW, MARGIN, RETRY_FACTOR, PRIOR_SPREAD) == (200, 1.05, 2.0, 0.25)
    assert pytest.approx(2.326, abs=1e-3) == KILL_Z
    history = [ok(float(i)) for i in range(1, WINDOW + 11)]
    assert decide(history, HINT, None).samples == WINDOW
    killed = decide([*history, kill(1000.0)], HINT, None)
    assert killed.memory_per_worker_gb == pytest.approx(RETRY_FACTOR * 1000.0)


@pytest.mark.parametrize(
    ("history", "hint_gb", "override_gb", "memory_gb", "source"),
    [
        pytest.param(
            [ok(0.0189)], 3.0, None, MIN_MEMORY_PER_WORKER_GB, "learned from 1 run", id="tiny peak"
        ),
        pytest.param(
            [ok(0.5)], 3.0, None, 0.5 * margin_for([0.5]), "learned from 1 run", id="above floor"
        ),
        pytest.param(
            [ok(MIN_MEMORY_PER_WORKER_GB / margin_for([1.0]))],
            3.0,
            None,
            MIN_MEMORY_PER_WORKER_GB,
            "learned from 1 run",
            id="exactly at the floor",
        ),
        pytest.param(
            [kill(0.05)],
            0.01,
            None,
            MIN_MEMORY_PER_WORKER_GB,
            "learned from 1 run",
            id="only kills: the raised hint is learned too",
        ),
        pytest.param([], 0.01, None, 0.01, "plugin hint", id="a small hint is kept"),
        pytest.param([ok(0.0189)], 3.0, 0.05, 0.05, "override", id="a small override is kept"),
    ],
)
def test_learned_requests_have_a_floor(
    history: list[Observation],
    hint_gb: float,
    override_gb: float | None,
    memory_gb: float,
    source: str,
) -> None:
    """A learned memory per worker is at least MIN_MEMORY_PER_WORKER_GB (a smaller one is
    less than an interpreter with numpy); a plugin hint or a workflow override below it is
    used as given."""
    override = None if override_gb is None else ResourceOverride(memory_per_worker_gb=override_gb)
    got = decide(history, ResourceHint(memory_per_worker_gb=hint_gb), override)
    assert got.memory_per_worker_gb == pytest.approx(memory_gb)
    assert got.source == source


def test_the_floor_is_a_quarter_gib_and_can_be_changed() -> None:
    """The floor is 0.25 GiB; decide takes another through min_memory_gb (as for the other
    constants)."""
    assert MIN_MEMORY_PER_WORKER_GB == 0.25
    got = decide([ok(0.01)], HINT, None, min_memory_gb=0.0)
    assert got.memory_per_worker_gb == pytest.approx(0.01 * margin_for([0.01]))


@pytest.mark.parametrize(
    ("hint", "source"),
    [
        (ResourceHint(), "default"),
        (ResourceHint(memory_per_worker_gb=6.0), "default"),  # equal to the default hint
        (ResourceHint(memory_per_worker_gb=4.0), "plugin hint"),
        (ResourceHint(gpus=1), "plugin hint"),
    ],
)
def test_source_without_observations(hint: ResourceHint, source: str) -> None:
    """Without observations the source says whether the type gave a hint of its own."""
    got = decide([], hint, None)
    assert got == ResolvedResources(
        memory_base_gb=hint.memory_base_gb,
        memory_per_worker_gb=hint.memory_per_worker_gb,
        scratch_gb=hint.scratch_gb,
        gpus=hint.gpus,
        seconds_per_unit=None,
        samples=0,
        source=source,
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (None, (1.5, 3.0, 10.0, 1, "learned from 1 run", 1)),
        (ResourceOverride(), (1.5, 3.0, 10.0, 1, "learned from 1 run", 1)),
        (ResourceOverride(memory_per_worker_gb=7.0), (1.5, 7.0, 10.0, 1, "override", 0)),
        (ResourceOverride(gpus=0), (1.5, 3.0, 10.0, 0, "learned from 1 run", 1)),
        (ResourceOverride(memory_base_gb=4.0), (4.0, 3.0, 10.0, 1, "learned from 1 run", 1)),
        (ResourceOverride(scratch_gb=0.0), (1.5, 3.0, 0.0, 1, "learned from 1 run", 1)),
        (
            ResourceOverride(memory_base_gb=0.5, memory_per_worker_gb=1.0, scratch_gb=2.0, gpus=2),
            (0.5, 1.0, 2.0, 2, "override", 0),
        ),
    ],
)
def test_override_wins_field_by_field(
    override: ResourceOverride | None, expected: tuple[float, float, float, int, str, int]
) -> None:
    """Each field the override sets wins; the others come from learning or the hint. The
    source is "override" when it fixes the memory per worker."""
    got = decide([ok(2.0, seconds=3.0)], HINT, override, **SMALL)  # type: ignore[arg-type]
    assert (
        got.memory_base_gb,
        got.memory_per_worker_gb,
        got.scratch_gb,
        got.gpus,
        got.source,
        got.samples,
    ) == expected
    assert got.seconds_per_unit == 3.0  # seconds are learned even under an override


def test_override_wins_over_a_pending_kill() -> None:
    """An override of the memory per worker wins even right after a kill."""
    got = decide([kill(50.0)], HINT, ResourceOverride(memory_per_worker_gb=4.0))
    assert got.memory_per_worker_gb == 4.0
    assert got.source == "override"


@pytest.mark.parametrize(
    ("history", "seconds"),
    [
        ([], None),
        ([kill(2.0)], None),
        ([ok(1.0)], None),  # a success without seconds
        ([ok(1.0, 5.0)], 5.0),
        ([ok(1.0, 5.0), ok(1.0, 1.0), ok(1.0, 3.0)], 3.0),
        ([ok(1.0, 4.0), ok(1.0, 2.0)], 3.0),  # even count: the mean of the middle two
        ([ok(1.0, 4.0), kill(9.0), ok(1.0, 2.0), kill(3.0)], 3.0),  # kills have no seconds
        ([ok(1.0, 100.0), *[ok(1.0, 1.0)] * 4], 1.0),  # only the window
    ],
)
def test_seconds_per_unit_is_the_median_of_the_window(
    history: list[Observation], seconds: float | None
) -> None:
    """seconds_per_unit is the median over the window's successes; None without any."""
    assert decide(history, HINT, None, **SMALL).seconds_per_unit == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0}, "window must be >= 1"),
        ({"retry_factor": 1.0}, "retry_factor must be > 1"),
        ({"margin": 0.9}, "margin must be >= 1"),
    ],
)
def test_bad_constants_are_refused(kwargs: dict[str, float], message: str) -> None:
    """Constants that would make the learner request too little are refused by name."""
    with pytest.raises(ValueError, match=message):
        decide([ok(1.0)], HINT, None, **kwargs)  # type: ignore[arg-type]


def test_learn_on_a_history_subset_is_the_same() -> None:
    """learn gives the same answer on the whole history and on what the store reads: the
    window's successes and the kills after its oldest one."""
    history = [kill(50.0), *[ok(float(i % 7) + 1) for i in range(30)]]
    history += [kill(3.0), ok(2.0), kill(9.0)]
    successes = [o for o in history if not o.oom][-4:]
    subset = [history[0], *successes[:-1], history[-3], history[-2], history[-1]]
    assert learn(history, window=4) == learn(subset, window=4)
    assert learn(history, window=4).largest_kill_gb == 50.0


# -- properties ------------------------------------------------------------------------------

memory = st.floats(min_value=0.01, max_value=500.0, allow_nan=False)
events = st.lists(st.tuples(st.booleans(), memory), max_size=60)


def as_history(items: list[tuple[bool, float]]) -> list[Observation]:
    return [Observation(gb, oom, None if oom else 1.0, "r") for oom, gb in items]


@given(events, st.lists(memory, min_size=1, max_size=5), st.sampled_from([None, 0.5, 40.0]))
@settings(max_examples=examples(300))
def test_never_below_retry_factor_times_the_last_kill_until_a_success(
    before: list[tuple[bool, float]], kills: list[float], hint_gb: float | None
) -> None:
    """After any history, while the latest events are kills, the request is at least
    RETRY_FACTOR x the last kill's limit (and x every kill since the last success)."""
    hint = ResourceHint() if hint_gb is None else ResourceHint(memory_per_worker_gb=hint_gb)
    history = as_history(before) + [kill(gb) for gb in kills]
    got = decide(history, hint, None).memory_per_worker_gb
    assert got >= RETRY_FACTOR * kills[-1]
    assert got >= RETRY_FACTOR * max(kills)


@given(st.lists(memory, min_size=1, max_size=40), memory, st.floats(1.0, 10.0))
@settings(max_examples=examples(300))
def test_a_larger_input_never_asks_for_less(
    peaks: list[float], size_gb: float, factor: float
) -> None:
    """Whatever the peaks and sizes seen, a task with a larger input never gets a smaller
    request (the exponent of input size is never negative)."""
    history = [Observation(p, input_bytes=int((i + 1) * 10**8)) for i, p in enumerate(peaks)]
    at = int(size_gb * 10**8) + 1
    low = decide(history, NO_CAP, None, input_bytes=at).memory_per_worker_gb
    high = decide(history, NO_CAP, None, input_bytes=int(at * factor)).memory_per_worker_gb
    assert high >= low or math.isclose(high, low)


@given(st.lists(memory, min_size=1, max_size=40))
@settings(max_examples=examples(300))
def test_more_of_the_same_never_widens_the_margin(peaks: list[float]) -> None:
    """Seeing the same peaks once more never makes the margin wider: samples only narrow
    the uncertainty."""
    once = explain([ok(p) for p in peaks], NO_CAP).margin
    twice = explain([ok(p) for p in peaks * 2], NO_CAP).margin
    assert once is not None
    assert twice is not None
    assert twice <= once + 1e-9


@given(events, st.sampled_from([0.01, 3.0]))
def test_a_learned_request_is_never_below_the_floor(
    items: list[tuple[bool, float]], hint_gb: float
) -> None:
    """Whatever was observed, a request learned from observations is at least
    MIN_MEMORY_PER_WORKER_GB; without observations it is the hint, however small."""
    got = decide(as_history(items), ResourceHint(memory_per_worker_gb=hint_gb), None)
    if items:
        assert got.memory_per_worker_gb >= MIN_MEMORY_PER_WORKER_GB
    else:
        assert got.memory_per_worker_gb == hint_gb


@given(events)
def test_learned_request_covers_the_window_maximum_while_small(
    items: list[tuple[bool, float]],
) -> None:
    """With fewer than 20 successes in the window the margin covers every peak seen (times
    MARGIN), when no hint caps it."""
    history = as_history(items)
    successes = [o.memory_gb for o in history if not o.oom][-WINDOW:]
    assume(0 < len(successes) < 20)
    got = decide(history, NO_CAP, None).memory_per_worker_gb
    assert got >= max(successes) * MARGIN - 1e-9


def test_a_retry_asks_for_the_largest_peak_seen_above_the_kill() -> None:
    """While a kill is pending, the request is at least the largest peak of the window above
    the killed limit (x MARGIN), so a unit of a key with rare large peaks fits at its
    first retry; below the limit, peaks do not matter and RETRY_FACTOR x the limit holds."""
    history = [*[ok(1.0)] * 30, ok(9.0), *[ok(1.0)] * 30, kill(2.0)]
    got = explain(history, NO_CAP)
    assert got.kill_floor_gb == pytest.approx(9.0 * MARGIN)
    assert got.requested_gb >= 9.0 * MARGIN
    small = explain([*[ok(1.0)] * 30, kill(2.0)], NO_CAP)
    assert small.kill_floor_gb == pytest.approx(RETRY_FACTOR * 2.0)


def test_with_20_successes_the_request_stays_under_the_v1_rule() -> None:
    """From 20 successes on, a key whose peaks spread over two decades asks at most what
    learning v1 did (CEILING_FACTOR x the nearest-rank P95 of its peaks), not the far tail
    a log-normal shape would put past them; with fewer the shape still decides."""
    peaks = [0.3 * 1.3**i for i in range(20)]  # 0.3 .. 44 GiB
    got = explain([ok(p) for p in peaks], NO_CAP)
    assert got.requested_gb == pytest.approx(percentile(peaks, 95) * CEILING_FACTOR)
    few = explain([ok(p) for p in peaks[::2]], NO_CAP)
    assert few.requested_gb > max(peaks[::2]) * CEILING_FACTOR


def test_a_key_drifting_upward_raises_its_margin() -> None:
    """When the latest successes sit above the window's fit by more than two standard
    errors, the margin rises: a steady key and the same key drifting up by 30 % in its
    last 50 peaks get different requests, the drifting one above its latest peaks."""
    steady = [ok(4.0 * (1.02 if i % 2 else 0.98)) for i in range(150)]
    drifting = [*steady[:100], *[ok(5.2 * (1.02 if i % 2 else 0.98)) for i in range(50)]]
    calm = explain(steady, NO_CAP)
    moved = explain(drifting, NO_CAP)
    assert moved.margin is not None
    assert calm.margin is not None
    assert moved.margin > calm.margin
    assert moved.requested_gb >= 5.2 * 1.02
