"""The ETA's one rule (simrun.core.eta), on tables of cases and a simulated run."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.core.eta import (
    EtaRules,
    ObservedRate,
    ProgressSampler,
    RunProgress,
    TaskEta,
    learned_eta_s,
    observed_weight,
    pace_rate,
    run_eta_s,
    task_eta_s,
)


@pytest.mark.parametrize(
    ("remaining", "spu", "processes", "expected"),
    [
        (100, 0.5, 4, 12.5),
        (10, 1.0, 4, 3.0),  # waves of 4, 4 and 2 units
        (0, None, 0, 0.0),
        (-1, None, 0, 0.0),
        (10, None, 4, None),
        (10, 1.0, 0, None),
    ],
)
def test_learned_eta(remaining, spu, processes, expected):
    """The learned ETA is ceil(remaining / processes) x seconds per unit (units go in
    waves of the processes); 0 with nothing left, unknown without a speed or a process."""
    assert learned_eta_s(remaining, spu, processes) == expected


@pytest.mark.parametrize(
    ("observed", "processes", "weight"),
    [
        (ObservedRate(10.0, 0, 10.0, 5), 2, 0.0),  # no unit observed
        (ObservedRate(10.0, 4, 10.0, 5), 2, 0.5),  # 4 of max(8, 4 x 2) units
        (ObservedRate(10.0, 8, 10.0, 5), 2, 1.0),
        (ObservedRate(10.0, 8, 10.0, 5), 4, 0.5),  # 8 of 4 x 4 units
        (ObservedRate(10.0, 1000, 1.0, 1), 2, 1 / 3),  # 1 of 3 steps observed
        (ObservedRate(10.0, 4, 1.0, 1), 2, 1 / 6),  # both short
        (ObservedRate(10.0, 10**6, 60.0, 100), 2, 1.0),
    ],
)
def test_observed_weight(observed, processes, weight):
    """The observed rate is trusted as units and steps of progress observed grow: the
    product of the units seen over max(8, 4 x processes) and the steps seen over 3, each
    at most 1."""
    assert observed_weight(observed, processes) == pytest.approx(weight)


@pytest.mark.parametrize(
    ("remaining", "spu", "processes", "observed", "eta"),
    [
        (0, 0.5, 2, ObservedRate(1.0, 100, 60.0, 10), 0.0),  # nothing left
        (1000, 1e-5, 2, None, 0.005),  # learned only: the no-op's compute time
        (1000, 1e-5, 2, ObservedRate(100.0, 10**5, 60.0, 10), 10.0),  # observed only
        (1000, 1e-5, 2, ObservedRate(100.0, 4, 60.0, 10), 0.5 * 10.0 + 0.5 * 0.005),
        (1000, None, 2, ObservedRate(100.0, 1, 0.1, 1), 10.0),  # nothing learned
        (1000, 0.5, 0, ObservedRate(100.0, 1, 0.1, 1), 10.0),  # no live process
        (1000, 0.5, 2, ObservedRate(0.0, 0, 0.0, 0), 250.0),  # a rate of 0 tells nothing
        (1000, None, 2, None, None),
    ],
)
def test_task_eta(remaining, spu, processes, observed, eta):
    """A task's ETA: remaining / observed rate blended with the learned ETA by the
    observed weight; either alone when the other is unknown; 0 with nothing left."""
    result = task_eta_s(remaining, spu, processes, observed)
    assert result == (None if eta is None else pytest.approx(eta))


@pytest.mark.parametrize(
    ("finished", "started_s", "now_s", "rate"),
    [
        (6, 100.0, 112.0, 0.5),
        (0, 100.0, 112.0, None),
        (6, None, 112.0, None),
        (6, 100.0, None, None),
        (6, 112.0, 112.0, None),
    ],
)
def test_pace_rate(finished, started_s, now_s, rate):
    """Without samples, the rate is the units finished since the task started, over that
    time; unknown before the first unit or without the times."""
    result = pace_rate(finished, started_s, now_s)
    assert (None if result is None else result.units_per_s) == rate


def sampled(samples, now=None):
    sampler = ProgressSampler()
    for t, finished in samples:
        sampler.observe(t, finished)
    return sampler, sampler.rate(samples[-1][0] if now is None else now)


STEADY = [(float(t), 100 * t) for t in range(11)]  # 100 units/s, a sample a second
LATE = [(0.0, 0), (10.0, 0)] + [(10.0 + t, 100 * t) for t in range(1, 11)]
FASTER = STEADY + [(10.0 + t, 1000 + 200 * t) for t in range(1, 21)]  # 200 units/s from 10 s


@pytest.mark.parametrize(
    ("samples", "now", "expected"),
    [
        # steady: the rate; units and time observed since the first progress (t = 1)
        (STEADY, None, (100.0, 900, 9.0)),
        # the time before the first unit finished (10 s) does not slow the rate
        (LATE, None, (100.0, 900, 9.0)),
        # a chunk of 100 units a second, sampled every 0.1 s between the reports
        ([(i / 10, 100 * (i // 10)) for i in range(106)], None, (100.0, 900, 9.5)),
        # nobody looked for a minute: the average over the gap
        ([(0.0, 0), (1.0, 100), (61.0, 6100)], None, (100.0, 6000, 60.0)),
        # slow units: 2 units every 100 s, looked at halfway between two
        ([(0.0, 0), (100.0, 2), (200.0, 4), (300.0, 6), (350.0, 6)], None, (0.02, 4, 250.0)),
        # a stall: 10 s without progress, beyond the usual 1 s between steps, counts
        (STEADY, 20.0, (400 / 13, 900, 19.0)),
        # the pace changed: the window (the recent half) follows the new one
        (FASTER, None, (200.0, 4900, 29.0)),
    ],
)  # fmt: skip
def test_sampler_rate(samples, now, expected):
    """The observed rate is measured over the recent samples (at least 5 s, else half the
    time observed, and at least 4 steps of progress), from the first sample that shows a
    unit finished; reports in bursts and gaps between samples measure the same, and a
    stall beyond the usual gap between steps lowers the rate."""
    _, rate = sampled(samples, now)
    assert rate is not None
    assert (rate.units_per_s, rate.units, rate.span_s) == pytest.approx(expected)


@pytest.mark.parametrize(
    "samples",
    [
        [(0.0, 0), (5.0, 0)],  # nothing finished yet
        [(0.0, 0), (5.0, 10)],  # one sample with progress
        [(0.0, 10), (5.0, 10)],  # progress before the first sample only
        [(0.0, 0), (1.0, 100), (2.0, 200), (3.0, 50)],  # units replayed: observed again
        [(0.0, 0), (1.0, 100), (2.0, 200), (1.5, 300)],  # the time went back
    ],
)
def test_sampler_rate_unknown(samples):
    """No rate before two samples showed progress (after a count or a time that went
    back, observation starts again)."""
    assert sampled(samples)[1] is None


def test_sampler_memory_is_bounded_by_the_window():
    """Samples closer than the spacing are merged and those older than the window
    needs are dropped: an hour of samples every 10 ms keeps at most the window's."""
    rules = EtaRules(max_window_s=60.0)
    sampler = ProgressSampler(rules)
    for i in range(360_000):
        sampler.observe(i / 100, i)
    assert len(sampler) <= rules.max_window_s / rules.spacing_s + rules.min_points + 1
    rate = sampler.rate(3599.99)
    assert rate is not None
    assert rate.units_per_s == pytest.approx(100.0)


@given(
    rate=st.integers(1, 10_000),
    gaps=st.lists(st.integers(1, 20), min_size=2, max_size=60),
    late=st.integers(0, 100),
)
def test_sampler_measures_a_constant_rate_whatever_the_sampling(rate, gaps, late):
    """A task finishing units at a constant rate is measured at that rate, however far
    apart the samples are and however late the first one comes."""
    sampler = ProgressSampler()
    t = late
    sampler.observe(float(t), rate * t)
    for gap in gaps:
        t += gap
        sampler.observe(float(t), rate * t)
    observed = sampler.rate(float(t))
    assert observed is not None
    assert observed.units_per_s == pytest.approx(rate)


def test_run_progress_samples_each_task():
    """A run's progress keeps a sampler per task; a task no longer counted is forgotten."""
    progress = RunProgress()
    assert progress.observe(0.0, {"a": 0, "b": 0}) == {}
    progress.observe(1.0, {"a": 10, "b": 0})
    rates = progress.observe(2.0, {"a": 20, "b": 5})
    assert set(rates) == {"a"}
    assert rates["a"].units_per_s == 10.0
    assert progress.observe(3.0, {"b": 10}).keys() == {"b"}
    assert progress.observe(4.0, {"a": 30, "b": 15}).keys() == {"b"}  # a: observed again


def t(name, eta, depends=(), queue="cpu", finished=False):
    return TaskEta(name, tuple(depends), queue, finished, eta)


@pytest.mark.parametrize(
    ("tasks", "eta"),
    [
        ([], 0.0),
        ([t("a", 0.0, finished=True)], 0.0),
        ([t("a", 5.0), t("b", 20.0, ["a"])], 25.0),  # a chain
        ([t("a", 5.0), t("b", 20.0, queue="gpu")], 20.0),  # side by side on two queues
        ([t("a", 5.0), t("b", 20.0)], 25.0),  # side by side, sharing the cpu processes
        ([t("a", 5.0, queue="gpu"), t("b", 20.0, ["a"], queue="gpu"), t("c", 30.0)], 30.0),
        # a diamond over two queues: a, then b (gpu) and c (cpu) side by side, then d
        (
            [t("a", 1.0), t("b", 10.0, ["a"], "gpu"), t("c", 4.0, ["a"]), t("d", 2.0, ["b", "c"])],
            13.0,
        ),
        ([t("a", 0.0, finished=True), t("b", 20.0, ["a"], queue="gpu")], 20.0),
        ([t("a", None, finished=True), t("b", 20.0)], 20.0),  # a finished task's is not needed
        ([t("a", 5.0), t("b", None, ["a"])], None),  # one unknown
    ],
)  # fmt: skip
def test_run_eta(tasks, eta):
    """A run's ETA is the longer of the longest chain of its unfinished tasks along the
    graph and each queue's unfinished tasks one after the other; unknown while one of
    them is; 0 once every task finished."""
    assert run_eta_s(tasks) == eta


@pytest.mark.parametrize(
    "fields",
    [
        {"window_fraction": 0.0},
        {"window_fraction": 1.5},
        {"min_window_s": 10.0, "max_window_s": 5.0},
        {"min_points": 0},
        {"min_full_units": 0},
        {"full_steps": 0},
    ],
)
def test_rules_refuse_nonsense(fields):
    """The rule's constants are checked when made."""
    with pytest.raises(ValueError, match="must"):
        EtaRules(**fields)


def simulated_etas(
    total: int, rate: float, startup_s: float, report_s: float, look_s: float, spu: float
) -> list[tuple[float, float, float]]:
    """(done fraction, real remaining seconds, ETA) of a simulated run from 10 % done on:
    ``total`` units at ``rate`` per second after ``startup_s``, reported in chunks every
    ``report_s`` by two processes (out of step), looked at every ``look_s``; the learned
    seconds per unit ``spu`` on 2 processes."""
    end = startup_s + total / rate
    sampler = ProgressSampler()
    out = []
    now = 0.0
    while now < end:
        reported = 0.0
        if now > startup_s:
            for phase in (0.0, report_s / 2):  # two processes' reports, out of step
                steps = math.floor((now - startup_s - phase) / report_s)
                reported += max(0, steps) * report_s * rate / 2
        finished = min(total, int(reported))
        sampler.observe(now, finished)
        eta = task_eta_s(total - finished, spu, 2, sampler.rate(now))
        if finished >= total / 10:
            assert eta is not None
            out.append(((now - startup_s) * rate / total, end - now, eta))
        now += look_s
    return out


@pytest.mark.parametrize(
    ("total", "rate", "startup_s", "report_s", "look_s", "spu"),
    [
        (1_000_000, 20_000.0, 1.0, 1.0, 1.0, 1e-5),  # the 1 M no-op run, looked at each second
        (1_000_000, 6_000.0, 12.0, 1.0, 0.5, 1e-5),  # today's rate and start
        (1_000_000, 20_000.0, 0.5, 1.0, 0.2, 1e-5),  # looked at 5 times a second
        (400, 20.0, 1.0, 1.0, 1.0, 0.1),  # 400 x 100 ms units
        (20, 0.02, 0.0, 100.0, 10.0, 100.0),  # 100 s units, one a chunk
    ],
)
def test_simulated_run_eta_is_within_a_quarter_from_ten_percent(
    total, rate, startup_s, report_s, look_s, spu
):
    """A run at a steady rate with reports in bursts: from 10 % done on, its ETA is within
    25 % of the real remaining time while that is at least 4 reports' intervals, and
    within 25 % and a report's interval (the counts lag by up to a report) to the end (the
    acceptance figure of issue 12, simulated)."""
    etas = simulated_etas(total, rate, startup_s, report_s, look_s, spu)
    assert etas
    for done, real, eta in etas:
        assert abs(eta - real) <= 0.25 * real + report_s, (done, real, eta)
        if real >= 4 * report_s:
            assert abs(eta - real) <= 0.25 * real, (done, real, eta)


def test_a_short_run_trusts_the_learned_speed_first():
    """100 k units at 20 k units/s: at 10 % done (one step of progress observed) the ETA
    is still much the learned one (the compute time alone, far too short); from half done
    (many steps observed) it is the observed rate's, within 25 % while 4 reports are
    left."""
    etas = simulated_etas(100_000, 20_000.0, 0.5, 0.5, 0.25, 1e-5)
    _, first_real, first_eta = etas[0]
    assert first_eta < 0.5 * first_real
    late = [(real, eta) for done, real, eta in etas if done >= 0.5 and real >= 4 * 0.5]
    assert late
    assert all(abs(eta - real) <= 0.25 * real for real, eta in late)
