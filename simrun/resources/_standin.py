"""TEMPORARY stand-in for `policy.Explanation`/`policy.explain` (PLAN-13 contract) until the
lead lands them on main; deleted on rebase."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from simrun.plugins import ResourceHint
from simrun.resources.policy import MARGIN, Observation, decide, learn

__all__ = ["Explanation", "explain"]


@dataclass(frozen=True)
class Explanation:
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
    history: Sequence[Observation], hint: ResourceHint, *, input_bytes: int | None = None
) -> Explanation:
    learned = learn(history)
    resolved = decide(history, hint, None)
    peaks = [o.memory_gb for o in history if not o.oom and o.memory_gb > 0]
    logs = [math.log(p) for p in peaks]
    spread = statistics.pstdev(logs) if len(logs) >= 2 else None
    reasons: list[str] = []
    if learned.percentile_gb is not None:
        reasons.append(f"p95 of {len(peaks)} peaks is {learned.percentile_gb:.3g} GiB")
        reasons.append(f"times the margin {MARGIN}")
    if learned.floor_gb is not None:
        reasons.append(f"a kill since the last success: at least {learned.floor_gb:.3g} GiB")
    if not reasons:
        reasons.append("nothing learned: the hint")
    return Explanation(
        requested_gb=resolved.memory_per_worker_gb,
        source=resolved.source,
        samples=learned.samples,
        runs=learned.runs,
        center_gb=learned.percentile_gb,
        spread=spread,
        margin=MARGIN if learned.percentile_gb is not None else None,
        learned_gb=learned.memory_gb(hint.memory_per_worker_gb),
        hint_gb=hint.memory_per_worker_gb,
        hint_capped=False,
        kill_floor_gb=learned.floor_gb,
        input_slope=None,
        reasons=tuple(reasons),
    )
