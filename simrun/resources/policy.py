"""The decision: from the recorded observations of a key to the resources to request.

Everything here is pure (no I/O, no clock), so the rules are tested with tables and
properties, and the replay benchmark runs the very same functions the store runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Literal

from simrun.plugins import ResourceHint
from simrun.workflow import ResourceOverride

__all__ = [
    "MARGIN",
    "MIN_MEMORY_PER_WORKER_GB",
    "PERCENTILE",
    "PERCENTILE_METHOD",
    "RETRY_FACTOR",
    "WINDOW",
    "Learned",
    "Observation",
    "PercentileMethod",
    "ResolvedResources",
    "decide",
    "learn",
    "percentile",
    "source_of",
]

# Chosen from the replay (python benchmarks/learning.py /work/shared/traces/synthetic.csv
# [--variant-from-input] [--sweep]: 3,472 units over 43.6 h; wasted GiB·h relative to the
# static preset's 39,519, and the share of units killed at least once):
#
#   WINDOW MARGIN RETRY   with a cost setting (71 keys)   without (8 keys)
#      200   1.20   2.0     0.398 wasted, 3.60 % killed     0.799, 2.68 %
#      200   1.30   2.0     0.451,        3.05 %            0.883, 2.42 %
#      200   1.40   1.5     0.635,        3.23 %            0.890, 2.45 %
#      200   1.40   2.0     0.488,        2.65 %            0.876, 2.39 %   <- chosen
#      200   1.40   3.0     0.517,        2.65 %            0.929, 1.96 %
#      200   1.50   2.0     0.533,        2.13 %            0.951, 2.16 %
#       50   1.40   2.0     0.488,        2.65 %            0.872, 2.62 %
#
# MARGIN 1.4 is the smallest margin of the grid that keeps kills under 3 % of units in both
# modes; below it the units of a burst submitted after the first few successes of a key are
# killed together (a kill is only known when the unit ends, often hours later). RETRY 2.0
# wastes least at that margin: 1.5 means longer chains of kills, each charged a whole
# runtime; 3.0 overshoots what the retried unit needs. WINDOW hardly matters with a cost
# setting (few observations per key); without one, 200 kills fewer units than 50 on the
# key that mixes 5 GiB and 140 GiB units, because it keeps the large ones in view longer.
# With a cost setting the learner wastes less than half of the static preset; without one
# no constants of the grid do, since one request has to cover both kinds of unit.

#: How many of the latest successful memory observations of a key are summarized.
WINDOW = 200
#: The request is the percentile of the window times this.
MARGIN = 1.4
#: After a kill for memory the request is at least this times the killed process's limit,
#: until a later observation of the key succeeds.
RETRY_FACTOR = 2.0

#: The least memory per worker a learned request asks for (GiB). Below it a request is
#: smaller than a Python interpreter with numpy imported (a worker process holds about
#: 20 MiB before any plugin code, numpy adds more), so a learned figure under it says more
#: about the allocator than about the task, and a process switching to such a task would be
#: too tight to run anything. It bounds learned requests only: a workflow's override and a
#: plugin's hint are taken as given. (It leaves the replay above unchanged: every peak of the
#: trace is over 1 GiB.)
MIN_MEMORY_PER_WORKER_GB = 0.25

#: The percentile of the window that is requested (times MARGIN).
PERCENTILE = 95

PercentileMethod = Literal["nearest-rank", "linear"]

#: Nearest rank (Hyndman & Fan type 1, numpy's "inverted_cdf"): the smallest observation
#: with at least 95 % of the window at or below it. It is always a value that was really
#: measured, never an interpolation below one, and with fewer than 20 observations it is
#: their maximum, which is the cautious answer while little is known. (In the replay, linear
#: interpolation wasted 1.5 % less and killed 0.17 points more of the units: a wash.)
PERCENTILE_METHOD: PercentileMethod = "nearest-rank"


def percentile(
    values: Sequence[float], q: float, method: PercentileMethod = PERCENTILE_METHOD
) -> float:
    """The ``q``-th percentile (0 < q <= 100) of ``values``.

    ``"nearest-rank"``: the ceil(q/100 * n)-th smallest value (computed exactly, without
    float rounding of q/100 * n). ``"linear"``: interpolation between the closest ranks
    (Hyndman & Fan type 7, numpy's default), for comparison in the benchmark.
    """
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
    """One recorded observation as the decision sees it.

    ``memory_gb`` is the peak anonymous memory of one worker process, or for a kill
    (``oom``) the limit the killed process ran under. ``seconds_per_unit`` is None for a
    kill or when unknown. ``run`` is the id of the run that reported it.
    """

    memory_gb: float
    oom: bool = False
    seconds_per_unit: float | None = None
    run: str = ""


@dataclass(frozen=True)
class Learned:
    """What the observations of a key say, before hint and override are applied.

    ``percentile_gb`` is the percentile of the window of successes (None without any);
    ``floor_gb`` is RETRY_FACTOR times the largest limit killed since the last success
    (None when no kill is pending); ``samples`` and ``runs`` count the observations used
    (the window and the pending kills) and their distinct runs.
    """

    percentile_gb: float | None
    floor_gb: float | None
    seconds_per_unit: float | None
    samples: int
    runs: int

    def memory_gb(self, fallback_gb: float, margin: float = MARGIN) -> float | None:
        """The memory per worker the observations ask for; None when there are none.

        ``fallback_gb`` (the hint) is the base while only kills are known: the kill says
        "more than this", not how much.
        """
        if self.percentile_gb is not None:
            learned = self.percentile_gb * margin
            return learned if self.floor_gb is None else max(learned, self.floor_gb)
        if self.floor_gb is not None:
            return max(fallback_gb, self.floor_gb)
        return None


def learn(
    history: Sequence[Observation],
    *,
    window: int = WINDOW,
    retry_factor: float = RETRY_FACTOR,
    q: float = PERCENTILE,
    method: PercentileMethod = PERCENTILE_METHOD,
) -> Learned:
    """Summarize the observations of one key, oldest first.

    The window is the last ``window`` successful observations; the pending kills are the
    kills recorded after the last success. ``history`` may be the whole history or only
    those observations: the answer is the same.
    """
    if window < 1:
        raise ValueError(f"learn: window must be >= 1, got {window!r}")
    if not retry_factor > 1:
        raise ValueError(
            f"learn: retry_factor must be > 1 (a retry at the killed limit is killed again), "
            f"got {retry_factor!r}"
        )
    last_success = len(history) - 1
    while last_success >= 0 and history[last_success].oom:
        last_success -= 1
    pending = [history[i] for i in range(last_success + 1, len(history))]
    successes: list[Observation] = []
    i = last_success
    while i >= 0 and len(successes) < window:
        if not history[i].oom:
            successes.append(history[i])
        i -= 1
    seconds = [o.seconds_per_unit for o in successes if o.seconds_per_unit is not None]
    used = successes + pending
    return Learned(
        percentile_gb=percentile([o.memory_gb for o in successes], q, method)
        if successes
        else None,
        floor_gb=retry_factor * max(o.memory_gb for o in pending) if pending else None,
        seconds_per_unit=statistics.median(seconds) if seconds else None,
        samples=len(used),
        runs=len({o.run for o in used}),
    )


@dataclass(frozen=True)
class ResolvedResources:
    """The resources to request for a task, and where the memory per worker came from.

    ``source`` is ``"learned from N runs"``, ``"plugin hint"``, ``"default"`` (the type
    gives no hint of its own) or ``"override"`` (the workflow fixed the memory per worker).
    ``samples`` counts the memory observations the memory per worker was learned from.
    """

    memory_base_gb: float
    memory_per_worker_gb: float
    scratch_gb: float
    gpus: int
    seconds_per_unit: float | None
    samples: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def source_of(learned_runs: int | None, hint: ResourceHint) -> str:
    """The source text: learned from N runs, else plugin hint or default."""
    if learned_runs is not None:
        return f"learned from {learned_runs} run{'s' if learned_runs != 1 else ''}"
    return "default" if hint == ResourceHint() else "plugin hint"


def decide(
    history: Sequence[Observation],
    hint: ResourceHint,
    override: ResourceOverride | None,
    *,
    window: int = WINDOW,
    margin: float = MARGIN,
    retry_factor: float = RETRY_FACTOR,
    method: PercentileMethod = PERCENTILE_METHOD,
    min_memory_gb: float = MIN_MEMORY_PER_WORKER_GB,
) -> ResolvedResources:
    """The resources for a task whose key has ``history`` (oldest first).

    Memory per worker: the override's when it sets one; else the percentile of the window
    times ``margin``, raised to the pending-kill floor; else, with only kills, the hint
    raised to that floor; else the hint. A learned figure (the two middle cases) is at least
    ``min_memory_gb``; the override and the hint are used as they are. Base memory, scratch
    and GPUs are the hint's. Each field the override sets wins.
    """
    if not margin >= 1:
        raise ValueError(f"decide: margin must be >= 1, got {margin!r}")
    learned = learn(history, window=window, retry_factor=retry_factor, method=method)
    fixed = override if override is not None else ResourceOverride()
    learned_gb = learned.memory_gb(hint.memory_per_worker_gb, margin)
    if fixed.memory_per_worker_gb is not None:
        memory_gb, samples, source = fixed.memory_per_worker_gb, 0, "override"
    elif learned_gb is not None:
        memory_gb, samples = max(learned_gb, min_memory_gb), learned.samples
        source = source_of(learned.runs, hint)
    else:
        memory_gb, samples, source = hint.memory_per_worker_gb, 0, source_of(None, hint)
    return ResolvedResources(
        memory_base_gb=_pick(fixed.memory_base_gb, hint.memory_base_gb),
        memory_per_worker_gb=memory_gb,
        scratch_gb=_pick(fixed.scratch_gb, hint.scratch_gb),
        gpus=fixed.gpus if fixed.gpus is not None else hint.gpus,
        seconds_per_unit=learned.seconds_per_unit,
        samples=samples,
        source=source,
    )


def _pick(chosen: float | None, default: float) -> float:
    return default if chosen is None else chosen
