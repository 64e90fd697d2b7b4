"""The pure decision from a key's observations to the memory to request (`decide`; `explain`
says why): a log-normal fit of the last `WINDOW` peaks (at the input size when known) times a
margin from their spread (1 kill in 100), capped by the hint until a kill at the hint, at
least `RETRY_FACTOR` x a killed limit until a success. ``benchmarks/learning.py`` replays it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Literal

from simrun.plugins import ResourceHint
from simrun.workflow import ResourceOverride

#: How many of the latest successful memory observations of a key are summarized.
WINDOW = 200
#: The least margin of a learned request over the center (a factor).
MARGIN = 1.05
#: After a kill, the request is at least this times the killed limit until a later success.
RETRY_FACTOR = 2.0
#: The margin is exp(KILL_Z x the scale of the peaks around the center).
KILL_Z = 2.326
#: The spread (sd of log peaks) assumed before a key shows its own; it weighs as one sample.
PRIOR_SPREAD = 0.25
#: The exponent of input size assumed before a key's sizes show it, and its sd.
PRIOR_INPUT_SLOPE = 0.5
PRIOR_INPUT_SLOPE_SD = 0.5
#: From this many successes on, a request asks at most `CEILING_FACTOR` x the P95 of peaks.
CEILING_SAMPLES = 20
CEILING_FACTOR = 1.4
#: The latest successes compared with the fit to notice a key that drifts upward.
DRIFT_SAMPLES = 50
#: The largest exponent of input size a fit may give.
MAX_INPUT_SLOPE = 1.5

#: The least memory per worker a learned request asks for (GiB): less is smaller than an
#: interpreter with numpy. Overrides and hints are taken as given.
MIN_MEMORY_PER_WORKER_GB = 0.25

#: The part of the past peaks whose margin a request always covers (nearest rank).
PERCENTILE = 95

PercentileMethod = Literal["nearest-rank", "linear"]

#: Nearest rank (Hyndman & Fan type 1): always a measured value; the maximum under 20 values.
PERCENTILE_METHOD: PercentileMethod = "nearest-rank"

#: The default hint: its memory per worker is no author's bound (it caps nothing).
_DEFAULT_HINT = ResourceHint()


def percentile(
    values: Sequence[float], q: float, method: PercentileMethod = PERCENTILE_METHOD
) -> float:
    """The ``q``-th percentile (0 < q <= 100) of ``values``: the exact nearest rank, or
    ``"linear"`` interpolation (numpy's default) for comparison in the benchmark."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile: q must be in (0, 100], got {q!r}")
    ordered = sorted(values)
    n = len(ordered)
    exact_q = Fraction(str(q))
    if method == "nearest-rank":
        rank = math.ceil(exact_q * n / 100)
        return ordered[max(rank, 1) - 1]
    if method == "linear":
        position = exact_q * (n - 1) / 100
        low = math.floor(position)
        if low >= n - 1:
            return ordered[-1]
        weight = float(position - low)
        return ordered[low] + weight * (ordered[low + 1] - ordered[low])
    raise ValueError(f"percentile: unknown method {method!r} (nearest-rank or linear)")


@dataclass(frozen=True)
class Observation:
    """One observation: the peak anonymous memory of one worker process, or for a kill
    (``oom``) its limit; the run that reported it; the task's input size (None: unknown)."""

    memory_gb: float
    oom: bool = False
    seconds_per_unit: float | None = None
    run: str = ""
    input_bytes: int | None = None


@dataclass(frozen=True)
class Learned:
    """What the observations of a key say for one task, before hint and override (None
    without a success; ``floor_gb``: the least request while kills are pending)."""

    center_gb: float | None
    spread: float | None
    margin: float | None
    learned_gb: float | None
    floor_gb: float | None
    largest_kill_gb: float | None
    largest_peak_gb: float | None
    input_slope: float | None
    seconds_per_unit: float | None
    samples: int
    runs: int


def _fit(
    peaks: Sequence[float],
    sizes: Sequence[int] | None,
    input_bytes: int | None,
    margin_floor: float,
) -> tuple[float, float, float, float | None]:
    """(center, spread, margin, slope) of log peaks, at ``input_bytes`` when sizes are used."""
    n = len(peaks)
    ys = [math.log(max(p, 1e-9)) for p in peaks]
    mean_y = sum(ys) / n
    use_sizes = sizes is not None and input_bytes is not None
    xs = [math.log(max(s, 1)) for s in sizes] if sizes is not None and use_sizes else [0.0] * n
    x0 = math.log(max(input_bytes, 1)) if input_bytes is not None and use_sizes else 0.0
    mean_x = sum(xs) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope, slope_var = (PRIOR_INPUT_SLOPE, PRIOR_INPUT_SLOPE_SD**2) if use_sizes else (0.0, 0.0)
    spread2 = PRIOR_SPREAD**2
    # Two passes: the spread around the prior line weighs the key's own slope.
    for _ in range(2):
        residual2 = sum(
            (y - mean_y - slope * (x - mean_x)) ** 2 for x, y in zip(xs, ys, strict=True)
        )
        # the prior weighs as one sample: (1 x prior^2 + sum of r^2) / (1 + (n - 1))
        spread2 = (PRIOR_SPREAD**2 + residual2) / n
        if use_sizes:
            prior_precision = 1 / PRIOR_INPUT_SLOPE_SD**2
            data_precision = sxx / spread2
            own = sxy / sxx if sxx > 1e-12 else PRIOR_INPUT_SLOPE
            slope = (own * data_precision + PRIOR_INPUT_SLOPE * prior_precision) / (
                data_precision + prior_precision
            )
            slope = min(max(slope, 0.0), MAX_INPUT_SLOPE)
            slope_var = 1 / (data_precision + prior_precision)
    shift = x0 - mean_x
    center = mean_y + slope * shift
    # The slope's uncertainty pushes up on either side, so a larger input never asks less.
    spread_z = KILL_Z * math.sqrt(slope_var)
    worst = min(slope + spread_z, MAX_INPUT_SLOPE) if shift > 0 else max(slope - spread_z, 0.0)
    by_spread = mean_y + worst * shift + KILL_Z * math.sqrt(spread2 * (1 + 1 / n))
    residuals = [y - mean_y - slope * (x - mean_x) for x, y in zip(xs, ys, strict=True)]
    covered = center + percentile(residuals, PERCENTILE) + math.log(margin_floor)
    recent = residuals[-DRIFT_SAMPLES:]
    if len(recent) < n:
        # latest successes above the fit by two standard errors: a key drifting upward
        drift = sum(recent) / len(recent) - 2 * math.sqrt(spread2 / len(recent))
        by_spread += max(0.0, drift)
    if n >= CEILING_SAMPLES:
        # never past learning v1's P95 x 1.4: a key spread over decades is not log-normal
        ceiling = center + percentile(residuals, PERCENTILE) + math.log(CEILING_FACTOR)
        by_spread = min(by_spread, ceiling)
    upper = max(by_spread, covered, center + math.log(margin_floor))
    return (
        math.exp(center),
        math.sqrt(spread2),
        math.exp(upper - center),
        slope if use_sizes else None,
    )


def learn(
    history: Sequence[Observation],
    *,
    window: int = WINDOW,
    margin: float = MARGIN,
    retry_factor: float = RETRY_FACTOR,
    input_bytes: int | None = None,
) -> Learned:
    """Summarize the observations of one key, oldest first, for a task of ``input_bytes``:
    the last ``window`` successes and kills (pending: the kills after the last success)."""
    _check(window, margin, retry_factor)
    success_at = [i for i, o in enumerate(history) if not o.oom][-window:]
    successes = [history[i] for i in success_at]
    last = success_at[-1] if success_at else -1
    kills = [o for o in history if o.oom][-window:]
    pending = [o for o in history[last + 1 :] if o.oom][-window:]
    seconds = [o.seconds_per_unit for o in successes if o.seconds_per_unit is not None]
    used = successes + pending
    center, spread, factor, slope = _fit_window(successes, input_bytes, margin)
    return Learned(
        center_gb=center,
        spread=spread,
        margin=factor,
        learned_gb=None if center is None or factor is None else center * factor,
        floor_gb=_kill_floor(pending, successes, retry_factor, margin),
        largest_kill_gb=_largest(kills),
        largest_peak_gb=_largest(successes),
        input_slope=slope,
        seconds_per_unit=statistics.median(seconds) if seconds else None,
        samples=len(used),
        runs=len({o.run for o in used}),
    )


def _check(window: int, margin: float, retry_factor: float) -> None:
    if window < 1:
        raise ValueError(f"learn: window must be >= 1, got {window!r}")
    if not retry_factor > 1:
        raise ValueError(
            f"learn: retry_factor must be > 1 (a retry at the killed limit is killed again), "
            f"got {retry_factor!r}"
        )
    if not margin >= 1:
        raise ValueError(f"learn: margin must be >= 1, got {margin!r}")


def _largest(observations: Sequence[Observation]) -> float | None:
    return max((o.memory_gb for o in observations), default=None)


def _fit_window(
    successes: Sequence[Observation], input_bytes: int | None, margin: float
) -> tuple[float | None, float | None, float | None, float | None]:
    """`_fit` of the window's peaks (sizes when all are known); None without a success."""
    if not successes:
        return None, None, None, None
    sizes = [o.input_bytes for o in successes]
    known = [s for s in sizes if s is not None]
    peaks = [o.memory_gb for o in successes]
    return _fit(peaks, known if len(known) == len(sizes) else None, input_bytes, margin)


def _kill_floor(
    pending: Sequence[Observation],
    successes: Sequence[Observation],
    retry_factor: float,
    margin: float,
) -> float | None:
    """The least request while kills are pending: retry_factor x the largest killed limit,
    and the largest peak of the window above it x margin (so the retry fits at once)."""
    if not pending:
        return None
    killed = max(o.memory_gb for o in pending)
    above = [o.memory_gb for o in successes if o.memory_gb > killed]
    return max(retry_factor * killed, max(above, default=0.0) * margin)


@dataclass(frozen=True)
class Explanation:
    """Why a key's next task gets the memory per worker it gets (``simrun resources KEY``):
    what `decide` gives without an override, the parts it was made of, and ``reasons``."""

    requested_gb: float
    source: str
    samples: int
    runs: int
    center_gb: float | None
    spread: float | None
    margin: float | None
    learned_gb: float | None
    hint_gb: float
    hint_capped: bool
    kill_floor_gb: float | None
    input_slope: float | None
    reasons: tuple[str, ...]


def explain(
    history: Sequence[Observation],
    hint: ResourceHint,
    *,
    input_bytes: int | None = None,
    window: int = WINDOW,
    margin: float = MARGIN,
    retry_factor: float = RETRY_FACTOR,
    min_memory_gb: float = MIN_MEMORY_PER_WORKER_GB,
) -> Explanation:
    """The memory per worker for a task of a key with ``history`` (oldest first), and why."""
    got = learn(
        history, window=window, margin=margin, retry_factor=retry_factor, input_bytes=input_bytes
    )
    hint_gb = hint.memory_per_worker_gb
    reasons: list[str] = []
    capped = False
    if got.learned_gb is not None and got.center_gb is not None and got.margin is not None:
        sized = (
            f" at this input size (memory ~ input^{got.input_slope:.2f})"
            if got.input_slope is not None
            else ""
        )
        reasons.append(
            f"typical peak {_gb(got.center_gb)}{sized} x margin {got.margin:.2f} "
            f"(spread ±{100 * (math.exp(got.spread or 0.0) - 1):.0f} % over "
            f"{_count(got.samples - _pending(history), 'sample')}) = {_gb(got.learned_gb)}"
        )
        memory = got.learned_gb
        cap = _cap(got, hint, margin, retry_factor)
        if cap is not None and memory > cap:
            capped = True
            memory = cap
            if got.largest_kill_gb is not None and got.largest_kill_gb >= hint_gb:
                reasons.append(
                    f"capped at {_gb(cap)}: a kill at {_gb(got.largest_kill_gb)} showed the "
                    f"hint ({_gb(hint_gb)}) too small, and nothing larger was seen"
                )
            else:
                reasons.append(
                    f"capped at the hint {_gb(hint_gb)}: no unit was killed at the hint yet"
                )
    elif got.floor_gb is not None:
        memory = hint_gb
        reasons.append(f"no success yet: the hint {_gb(hint_gb)}")
    else:
        memory = hint_gb
        reasons.append(
            "nothing learned yet: the hint" if hint != _DEFAULT_HINT else "nothing learned yet"
        )
    if got.floor_gb is not None and got.floor_gb > memory:
        memory = got.floor_gb
        reasons.append(
            f"raised to {_gb(got.floor_gb)} until a unit of the key succeeds: at least "
            f"{retry_factor:g} x the limit of the last kill, and the largest peak seen above "
            f"it x margin"
        )
    learned = got.learned_gb is not None or got.floor_gb is not None
    if learned and memory < min_memory_gb:
        memory = min_memory_gb
        reasons.append(f"raised to the least learned request, {_gb(min_memory_gb)}")
    return Explanation(
        requested_gb=memory,
        source=source_of(got.runs if learned else None, hint),
        samples=got.samples if learned else 0,
        runs=got.runs,
        center_gb=got.center_gb,
        spread=got.spread,
        margin=got.margin,
        learned_gb=got.learned_gb,
        hint_gb=hint_gb,
        hint_capped=capped,
        kill_floor_gb=got.floor_gb,
        input_slope=got.input_slope,
        reasons=tuple(reasons),
    )


def _pending(history: Sequence[Observation]) -> int:
    """How many kills end ``history`` (since its last success)."""
    return next((i for i, o in enumerate(reversed(history)) if not o.oom), len(history))


def _cap(got: Learned, hint: ResourceHint, margin: float, retry_factor: float) -> float | None:
    """The most a learned request may ask: the hint until a kill at it, then the larger of
    retry_factor x that kill and the largest peak x margin; None for a default hint."""
    if hint.memory_per_worker_gb == _DEFAULT_HINT.memory_per_worker_gb:
        return None
    typical = (got.center_gb or 0.0) * margin
    killed = got.largest_kill_gb
    if killed is None or killed < hint.memory_per_worker_gb:
        return max(hint.memory_per_worker_gb, typical)
    return max(retry_factor * killed, (got.largest_peak_gb or 0.0) * margin, typical)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _gb(value: float) -> str:
    return f"{value:.3g} GiB" if value >= 1 else f"{value * 1024:.3g} MiB"


@dataclass(frozen=True)
class ResolvedResources:
    """The resources to request for a task; ``source`` says where the memory per worker
    came from: "learned from N runs", "plugin hint", "default" or "override"."""

    memory_base_gb: float
    memory_per_worker_gb: float
    scratch_gb: float
    gpus: int
    seconds_per_unit: float | None
    samples: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_of(learned_runs: int | None, hint: ResourceHint) -> str:
    """The source text: learned from N runs, else plugin hint or default."""
    if learned_runs is not None:
        return f"learned from {_count(learned_runs, 'run')}"
    return "default" if hint == ResourceHint() else "plugin hint"


def decide(
    history: Sequence[Observation],
    hint: ResourceHint,
    override: ResourceOverride | None,
    *,
    input_bytes: int | None = None,
    window: int = WINDOW,
    margin: float = MARGIN,
    retry_factor: float = RETRY_FACTOR,
    min_memory_gb: float = MIN_MEMORY_PER_WORKER_GB,
) -> ResolvedResources:
    """The resources for a task whose key has ``history`` (oldest first): each field the
    override sets, else the memory per worker `explain` gives and the hint's others."""
    why = explain(
        history,
        hint,
        input_bytes=input_bytes,
        window=window,
        margin=margin,
        retry_factor=retry_factor,
        min_memory_gb=min_memory_gb,
    )
    fixed = override if override is not None else ResourceOverride()
    if fixed.memory_per_worker_gb is not None:
        memory_gb, samples, source = fixed.memory_per_worker_gb, 0, "override"
    else:
        memory_gb, samples, source = why.requested_gb, why.samples, why.source
    seconds = learn(history, window=window, retry_factor=retry_factor).seconds_per_unit
    return ResolvedResources(
        memory_base_gb=_pick(fixed.memory_base_gb, hint.memory_base_gb),
        memory_per_worker_gb=memory_gb,
        scratch_gb=_pick(fixed.scratch_gb, hint.scratch_gb),
        gpus=fixed.gpus if fixed.gpus is not None else hint.gpus,
        seconds_per_unit=seconds,
        samples=samples,
        source=source,
    )


def _pick(chosen: float | None, default: float) -> float:
    return default if chosen is None else chosen
