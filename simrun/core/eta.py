"""The one ETA rule of tasks and runs (pure): a task's observed rate blended with its learned
speed (`task_eta_s`); a run's longest chain of tasks, at least each queue's tasks one after
the other (`run_eta_s`)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EtaRules:
    """The constants of the rule: the bounds of the rate's window, and how much must be
    observed before the observed rate is trusted fully."""

    min_window_s: float = 5.0
    window_fraction: float = 0.5
    max_window_s: float = 900.0
    min_points: int = 4
    spacing_s: float = 0.25  # samples of progress closer than this are merged
    full_units_per_process: float = 4.0
    min_full_units: int = 8
    full_steps: int = 3

    def __post_init__(self) -> None:
        if not 0 < self.window_fraction <= 1:
            raise ValueError(f"window_fraction must be in (0, 1], not {self.window_fraction}")
        if self.min_window_s < 0 or self.max_window_s < self.min_window_s:
            raise ValueError("min_window_s must be in [0, max_window_s]")
        if self.min_points < 1 or self.min_full_units < 1 or self.full_steps < 1:
            raise ValueError("min_points, min_full_units and full_steps must be at least 1")


#: The rules the service and the command line use.
ETA_RULES = EtaRules()


@dataclass(frozen=True)
class ObservedRate:
    """A task's completion rate over the window, and all observed since the start: units,
    seconds and steps; ``age_s``: since the count last grew (at most the usual gap)."""

    units_per_s: float
    units: int
    span_s: float
    steps: int
    age_s: float = 0.0


def learned_eta_s(remaining: int, seconds_per_unit: float | None, processes: int) -> float | None:
    """Seconds for ``remaining`` units in waves of ``processes``; None while the speed or
    the processes are unknown."""
    if remaining <= 0:
        return 0.0
    if seconds_per_unit is None or processes <= 0:
        return None
    return math.ceil(remaining / processes) * seconds_per_unit


def observed_weight(observed: ObservedRate, processes: int, rules: EtaRules = ETA_RULES) -> float:
    """How far the observed rate is trusted over the learned speed, from 0 to 1."""
    full_units = max(float(rules.min_full_units), rules.full_units_per_process * processes)
    by_units = min(1.0, observed.units / full_units)
    by_steps = min(1.0, observed.steps / rules.full_steps)
    return max(0.0, by_units * by_steps)


def task_eta_s(
    remaining: int,
    seconds_per_unit: float | None,
    processes: int,
    observed: ObservedRate | None,
    rules: EtaRules = ETA_RULES,
) -> float | None:
    """A task's ETA: the observed and the learned one blended by `observed_weight` (either
    alone when the other is unknown)."""
    if remaining <= 0:
        return 0.0
    learned = learned_eta_s(remaining, seconds_per_unit, processes)
    if observed is None or observed.units_per_s <= 0:
        return learned
    seen = max(0.0, remaining / observed.units_per_s - observed.age_s)
    if learned is None:
        return seen
    w = observed_weight(observed, processes, rules)
    return w * seen + (1.0 - w) * learned


def pace_rate(finished: int, started_s: float | None, now_s: float | None) -> ObservedRate | None:
    """The rate of a task from its start to ``now_s`` (for a reader without samples)."""
    if started_s is None or now_s is None or finished <= 0:
        return None
    span = now_s - started_s
    if span <= 0:
        return None
    return ObservedRate(finished / span, finished, span, 1)


class ProgressSampler:
    """The (time, finished units) samples of one task that show progress, within the
    window, and its observed rate; a count or a time that goes back starts again."""

    def __init__(self, rules: EtaRules = ETA_RULES) -> None:
        self.rules = rules
        self._points: deque[tuple[float, int]] = deque()  # from the start of observation
        self._start: tuple[float, int] | None = None
        self._last: tuple[float, int] | None = None  # the latest sample, progress or not
        self._placed = 0.0  # when the latest point was first placed (it moves when merged)
        self._steps = 0  # points placed since the start

    def __len__(self) -> int:
        """The samples kept."""
        return len(self._points)

    def reset(self) -> None:
        """Forget every sample."""
        self._points.clear()
        self._start = self._last = None
        self._steps = 0

    def observe(self, t: float, finished: int) -> None:
        """A sample: ``finished`` units at time ``t``."""
        last = self._last
        if last is not None and (finished < last[1] or t < last[0]):
            self.reset()
            last = None
        self._last = (t, finished)
        if self._start is None:
            if finished > 0:
                self._start = (t, finished)
                self._points.append((t, finished))
                self._placed = t
            return
        if finished == self._points[-1][1]:
            return
        if len(self._points) > 1 and t - self._placed < self.rules.spacing_s:
            self._points[-1] = (t, finished)  # merged with the step before
        else:
            self._points.append((t, finished))
            self._placed = t
            self._steps += 1
        first = self._window_first(t)
        for _ in range(first):
            self._points.popleft()

    def _window(self, now: float) -> float:
        assert self._start is not None
        r = self.rules
        return min(r.max_window_s, max(r.min_window_s, r.window_fraction * (now - self._start[0])))

    def _window_first(self, now: float) -> int:
        """The index of the point the window starts at."""
        points = self._points
        edge = now - self._window(now)
        first = 0
        for i, (t, _) in enumerate(points):
            if t > edge:
                break
            first = i
        return max(0, min(first, len(points) - 1 - self.rules.min_points))

    def rate(self, now: float) -> ObservedRate | None:
        """The observed rate at ``now``; None before two samples showed progress."""
        if self._start is None or len(self._points) < 2:
            return None
        points = self._points
        t_first, d_first = points[self._window_first(now)]
        t_last, d_last = points[-1]
        steps = sum(1 for t, _ in points if t > t_first)
        span = t_last - t_first
        if span <= 0 or steps <= 0:
            return None
        usual_gap = span / steps
        span += max(0.0, now - t_last - usual_gap)
        t_start, d_start = self._start
        return ObservedRate(
            (d_last - d_first) / span,
            d_last - d_start,
            max(0.0, now - t_start),
            self._steps,
            min(max(0.0, now - t_last), usual_gap),
        )


class RunProgress:
    """The samplers of one run's tasks, by task name."""

    def __init__(self, rules: EtaRules = ETA_RULES) -> None:
        self.rules = rules
        self._tasks: dict[str, ProgressSampler] = {}

    def observe(self, now: float, finished: Mapping[str, int]) -> dict[str, ObservedRate]:
        """Sample every task's finished units at ``now``: the observed rates (tasks not in
        ``finished`` are forgotten)."""
        for gone in set(self._tasks) - set(finished):
            del self._tasks[gone]
        rates: dict[str, ObservedRate] = {}
        for name, count in finished.items():
            sampler = self._tasks.get(name)
            if sampler is None:
                sampler = self._tasks[name] = ProgressSampler(self.rules)
            sampler.observe(now, count)
            rate = sampler.rate(now)
            if rate is not None:
                rates[name] = rate
        return rates


@dataclass(frozen=True)
class TaskEta:
    """What `run_eta_s` needs of a task."""

    name: str
    depends: tuple[str, ...]
    queue: str
    finished: bool
    eta_s: float | None


def run_eta_s(tasks: Sequence[TaskEta]) -> float | None:
    """A run's ETA: the longer of its longest chain of unfinished tasks and the sum of each
    queue's; None while an unfinished task's is unknown."""
    left = {t.name: t for t in tasks if not t.finished}
    if not left:
        return 0.0
    etas: dict[str, float] = {}
    for t in left.values():
        if t.eta_s is None:
            return None
        etas[t.name] = t.eta_s
    ends: dict[str, float] = {}

    def end(name: str, seen: frozenset[str]) -> float:
        if name in ends:
            return ends[name]
        before = [end(d, seen | {name}) for d in left[name].depends if d in left and d not in seen]
        ends[name] = etas[name] + max(before, default=0.0)
        return ends[name]

    chain = max(end(name, frozenset()) for name in left)
    by_queue: dict[str, float] = {}
    for t in left.values():
        by_queue[t.queue] = by_queue.get(t.queue, 0.0) + etas[t.name]
    return max(chain, max(by_queue.values()))
