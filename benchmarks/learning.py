"""Replay a memory trace through simrun's learner and the baselines users have today.

    python benchmarks/learning.py /work/shared/traces/synthetic.csv
    python benchmarks/learning.py TRACE.csv --variant-from-input
    python benchmarks/learning.py TRACE.csv --sweep        # tries a grid of constants

Replay rules (/work/shared/traces/README.md): units are submitted in trace order; a unit's
request is decided when it is submitted (or resubmitted), from what is known then; its
measurement becomes known when it completes (submit time + its runtime). A unit whose
request is below its peak is killed for memory, charged request x its full runtime, and
resubmitted at once. Each policy is replayed on its own timeline, side by side in one run.

simrun's learner runs through the real `ResourceStore` (record/resolve on a temporary SQLite
file). The same replay through the pure `decide` on in-memory histories must give the very
same requests; the table says whether it did. ``--sweep`` uses the pure replay only.

Baselines:
- static preset: every unit asks for the preset; a killed unit is resubmitted at twice its
  last request (a user raising the preset by hand);
- Nextflow's idiom: ``memory = preset * task.attempt`` with ``errorStrategy 'retry'``;
- max seen: the largest peak completed so far for the key (the preset before any), and a
  kill doubles the key's level;
- VPA-like: the 90th percentile of the key's peaks, weighted by exponential decay (half-life
  24 h, the Kubernetes default), times 1.15; a kill adds a sample of max(1.2 x limit,
  limit + 100 MiB), and the killed unit is resubmitted at least at that bump;
- oracle: the unit's own peak (no waste, no kill: the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import heapq
import itertools
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from simrun.plugins import ResourceHint
from simrun.resources import (
    MARGIN,
    PERCENTILE_METHOD,
    RETRY_FACTOR,
    WINDOW,
    Observation,
    ResourceKey,
    ResourceStore,
    decide,
)
from simrun.resources.policy import PercentileMethod
from simrun.worker import WorkerReport

MIB_IN_GB = 1 / 1024
MAX_ATTEMPTS = 60


@dataclass(frozen=True)
class Unit:
    index: int
    submit_s: float
    key: str
    peak_gb: float
    seconds: float
    preset_gb: float
    input_bytes: int


def load_trace(
    path: Path, variant_from_input: bool = False, limit: int | None = None
) -> list[Unit]:
    """The units of a trace CSV, in submit order; with ``variant_from_input`` the log2
    bucket of ``input_bytes`` joins the key's variant."""
    units: list[Unit] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"submit_s", "key", "peak_gb", "seconds", "preset_gb", "input_bytes"} - set(
            reader.fieldnames or ()
        )
        if missing:
            raise SystemExit(f"{path}: the trace lacks the columns {', '.join(sorted(missing))}")
        for line, row in enumerate(reader, start=2):
            try:
                key = ResourceKey.from_text(row["key"])
                input_bytes = int(row["input_bytes"])
                if variant_from_input:
                    bucket = f"in2^{int(math.log2(max(input_bytes, 1)))}"
                    variant = f"{key.variant}:{bucket}" if key.variant else bucket
                    key = ResourceKey(key.task_type, key.model, variant)
                units.append(
                    Unit(
                        index=len(units),
                        submit_s=float(row["submit_s"]),
                        key=key.text(),
                        peak_gb=float(row["peak_gb"]),
                        seconds=float(row["seconds"]),
                        preset_gb=float(row["preset_gb"]),
                        input_bytes=input_bytes,
                    )
                )
            except (KeyError, ValueError) as exc:
                raise SystemExit(f"{path}, line {line}: {exc}") from exc
            if limit is not None and len(units) >= limit:
                break
    units.sort(key=lambda u: (u.submit_s, u.index))
    return units


# -- policies --------------------------------------------------------------------------------


class Policy(Protocol):
    name: str

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        """The memory to request for ``unit``'s attempt (1 = first), ``last_gb`` the request
        of the attempt killed just before (0 for a first attempt)."""
        ...

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None: ...

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None: ...


class Static:
    name = "static preset"

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        return unit.preset_gb if attempt == 1 else 2 * last_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        return None

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        return None


class Nextflow(Static):
    name = "nextflow preset x attempt"

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        return unit.preset_gb * attempt


class MaxSeen(Static):
    name = "max seen, x2 on kill"

    def __init__(self) -> None:
        self.level: dict[str, float] = {}

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        return self.level.get(unit.key, unit.preset_gb)

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.level[unit.key] = max(self.level.get(unit.key, 0.0), unit.peak_gb)

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.level[unit.key] = max(self.level.get(unit.key, 0.0), 2 * request_gb)


class VpaLike(Static):
    name = "VPA-like P90 decayed x1.15"
    HALF_LIFE_S = 24 * 3600.0

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, float]]] = defaultdict(list)

    @staticmethod
    def bump(limit_gb: float) -> float:
        return max(1.2 * limit_gb, limit_gb + 100 * MIB_IN_GB)

    def weight(self, now_s: float) -> float:
        return math.exp2(now_s / self.HALF_LIFE_S)

    def recommend(self, unit: Unit) -> float:
        samples = self.samples.get(unit.key)
        if not samples:
            return unit.preset_gb
        ordered = sorted(samples)
        total = sum(w for _, w in ordered)
        running = 0.0
        for value, w in ordered:
            running += w
            if running >= 0.9 * total:
                return value * 1.15
        return ordered[-1][0] * 1.15

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        recommended = self.recommend(unit)
        return recommended if attempt == 1 else max(recommended, self.bump(last_gb))

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.samples[unit.key].append((unit.peak_gb, self.weight(now_s)))

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.samples[unit.key].append((self.bump(request_gb), self.weight(now_s)))


class Oracle(Static):
    name = "oracle (own peak)"

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        return unit.peak_gb


def _hint(unit: Unit) -> ResourceHint:
    return ResourceHint(memory_base_gb=0.0, memory_per_worker_gb=unit.preset_gb)


class SimrunStore(Static):
    """simrun's learner through the real ResourceStore on a SQLite file."""

    name = "simrun (ResourceStore)"

    def __init__(self, store: ResourceStore) -> None:
        self.store = store
        self.requests: list[float] = []

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        resolved = await self.store.resolve(ResourceKey.from_text(unit.key), _hint(unit), None)
        self.requests.append(resolved.memory_per_worker_gb)
        return resolved.memory_per_worker_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        report = WorkerReport(
            peak_memory_gb=(unit.peak_gb,),
            seconds_per_unit=unit.seconds,
            units=1,
            limit_gb=request_gb,
        )
        await self.store.record(ResourceKey.from_text(unit.key), report, 0.0, run="trace")

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        report = WorkerReport(
            peak_memory_gb=(),
            seconds_per_unit=None,
            units=1,
            limit_gb=request_gb,
            killed_for_memory=True,
        )
        await self.store.record(ResourceKey.from_text(unit.key), report, 0.0, oom=True, run="trace")


@dataclass
class SimrunPure(Static):
    """The same decisions from in-memory histories (the pure `decide`), for checks and the
    sweep."""

    window: int = WINDOW
    margin: float = MARGIN
    retry_factor: float = RETRY_FACTOR
    method: PercentileMethod = PERCENTILE_METHOD
    name: str = "simrun (pure decide)"
    history: dict[str, list[Observation]] = field(default_factory=lambda: defaultdict(list))
    requests: list[float] = field(default_factory=list)

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        resolved = decide(
            self.history[unit.key],
            _hint(unit),
            None,
            window=self.window,
            margin=self.margin,
            retry_factor=self.retry_factor,
            method=self.method,
        )
        self.requests.append(resolved.memory_per_worker_gb)
        return resolved.memory_per_worker_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.history[unit.key].append(Observation(unit.peak_gb, False, unit.seconds, "trace"))

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.history[unit.key].append(Observation(request_gb, True, None, "trace"))


# -- the replay ------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    requested_gbh: float = 0.0
    used_gbh: float = 0.0
    kills: int = 0
    killed_units: int = 0
    lost_h: float = 0.0
    units: int = 0

    @property
    def wasted_gbh(self) -> float:
        wasted = self.requested_gbh - self.used_gbh
        return 0.0 if abs(wasted) < 1e-6 * max(self.requested_gbh, 1.0) else wasted

    @property
    def wasted_pct(self) -> float:
        return 100 * self.wasted_gbh / self.requested_gbh if self.requested_gbh else 0.0

    @property
    def killed_pct(self) -> float:
        return 100 * self.killed_units / self.units if self.units else 0.0


async def replay(units: Sequence[Unit], policy: Policy) -> Outcome:
    """Run ``units`` through ``policy`` on an event timeline; completions at an instant are
    known before the submissions of that instant."""
    out = Outcome(policy.name, units=len(units))
    order = itertools.count()
    # (time, phase, seq, unit, attempt, request): phase 0 = completion, 1 = submission
    events: list[tuple[float, int, int, Unit, int, float]] = [
        (u.submit_s, 1, next(order), u, 1, 0.0) for u in units
    ]
    heapq.heapify(events)
    killed: set[int] = set()
    while events:
        now_s, phase, _, unit, attempt, request_gb = heapq.heappop(events)
        if phase == 1:
            request_gb = await policy.request(unit, attempt, now_s, request_gb)
            if not request_gb > 0:
                raise RuntimeError(f"{policy.name} requested {request_gb} GiB for unit {unit}")
            out.requested_gbh += request_gb * unit.seconds / 3600
            heapq.heappush(
                events, (now_s + unit.seconds, 0, next(order), unit, attempt, request_gb)
            )
        elif request_gb >= unit.peak_gb:
            out.used_gbh += unit.peak_gb * unit.seconds / 3600
            await policy.success(unit, request_gb, now_s)
        else:
            out.kills += 1
            out.lost_h += unit.seconds / 3600
            killed.add(unit.index)
            if attempt >= MAX_ATTEMPTS:
                raise RuntimeError(f"{policy.name}: unit {unit.index} killed {attempt} times")
            await policy.kill(unit, request_gb, now_s)
            heapq.heappush(events, (now_s, 1, next(order), unit, attempt + 1, request_gb))
    out.killed_units = len(killed)
    return out


def print_table(outcomes: Sequence[Outcome], simrun: Outcome) -> None:
    head = (
        f"{'policy':<28} {'requested GiB·h':>15} {'wasted GiB·h':>13} {'wasted %':>9} "
        f"{'kills':>6} {'units killed':>13} {'h lost to kills':>16}"
    )
    print(head)
    print("-" * len(head))
    for o in outcomes:
        print(
            f"{o.name:<28} {o.requested_gbh:>15.1f} {o.wasted_gbh:>13.1f} {o.wasted_pct:>8.1f}% "
            f"{o.kills:>6} {o.killed_units:>6} ({o.killed_pct:4.1f}%) {o.lost_h:>16.2f}"
        )
    print()
    print(f"simrun's ratios ({simrun.name}) to each baseline:")
    for o in outcomes:
        if o is simrun or o.name.startswith("simrun"):
            continue
        wasted = f"{simrun.wasted_gbh / o.wasted_gbh:.3f}" if o.wasted_gbh > 0 else "n/a (0)"
        lost = f"{simrun.lost_h / o.lost_h:.3f}" if o.lost_h > 0 else "n/a (0)"
        print(
            f"  vs {o.name:<28} requested x{simrun.requested_gbh / o.requested_gbh:.3f}  "
            f"wasted x{wasted}  kills {simrun.kills} vs {o.kills}  hours lost x{lost}"
        )


async def main_table(units: Sequence[Unit]) -> tuple[Outcome, Outcome]:
    with tempfile.TemporaryDirectory() as tmp:
        async with ResourceStore(Path(tmp) / "replay.db") as store:
            simrun_store = SimrunStore(store)
            start = time.perf_counter()
            real = await replay(units, simrun_store)
            store_s = time.perf_counter() - start
    pure_policy = SimrunPure()
    pure = await replay(units, pure_policy)
    same = simrun_store.requests == pure_policy.requests and (real.kills, real.requested_gbh) == (
        pure.kills,
        pure.requested_gbh,
    )
    baselines = [await replay(units, p()) for p in (Static, Nextflow, MaxSeen, VpaLike, Oracle)]
    print(
        f"{len(units)} units, {len({u.key for u in units})} keys; WINDOW={WINDOW}, "
        f"MARGIN={MARGIN}, RETRY_FACTOR={RETRY_FACTOR}, P95 {PERCENTILE_METHOD}"
    )
    print(
        f"ResourceStore replay: {len(simrun_store.requests)} resolves in {store_s:.1f} s; "
        f"same requests as the pure decide: {'yes' if same else 'NO'}"
    )
    print()
    print_table([real, *baselines], real)
    if not same:
        raise SystemExit("the ResourceStore and the pure decide disagree")
    return real, baselines[0]


async def sweep(units: Sequence[Unit]) -> None:
    static = await replay(units, Static())
    print(
        f"static preset wastes {static.wasted_gbh:.1f} GiB·h; target: < {static.wasted_gbh / 2:.1f}"
    )
    print(
        f"{'window':>6} {'margin':>6} {'retry':>5} {'method':<12} {'requested':>9} "
        f"{'wasted':>8} {'vs static':>9} {'kills':>6} {'units killed':>12} {'h lost':>7}"
    )
    rows: list[tuple[float, str]] = []
    methods: tuple[PercentileMethod, ...] = ("nearest-rank", "linear")
    for window, margin, retry, method in itertools.product(
        (20, 50, 200), (1.1, 1.2, 1.3, 1.4, 1.5, 1.6), (1.5, 2.0, 3.0), methods
    ):
        o = await replay(units, SimrunPure(window, margin, retry, method))
        ok = o.killed_pct < 3 and o.wasted_gbh < static.wasted_gbh / 2
        rows.append(
            (
                o.wasted_gbh,
                f"{window:>6} {margin:>6.2f} {retry:>5.2f} {method:<12} {o.requested_gbh:>9.1f} "
                f"{o.wasted_gbh:>8.1f} {o.wasted_gbh / static.wasted_gbh:>9.3f} {o.kills:>6} "
                f"{o.killed_pct:>11.2f}% {o.lost_h:>7.2f}{'' if ok else '  (misses target)'}",
            )
        )
    for _, text in sorted(rows):
        print(text, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="trace CSV (see /work/shared/traces/README.md)")
    parser.add_argument(
        "--variant-from-input",
        action="store_true",
        help="put the log2 bucket of input_bytes into the key's variant",
    )
    parser.add_argument("--sweep", action="store_true", help="try a grid of constants instead")
    parser.add_argument("--limit", type=int, default=None, help="replay the first N rows only")
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        parser.error(f"no trace file at {args.trace}")
    units = load_trace(args.trace, args.variant_from_input, args.limit)
    if not units:
        parser.error(f"{args.trace} has no rows")
    print(f"trace {args.trace}{' (variant from input_bytes)' if args.variant_from_input else ''}")
    if args.sweep:
        asyncio.run(sweep(units))
        return
    real, static = asyncio.run(main_table(units))
    print()
    print(
        f"target: simrun wastes < half of the static preset "
        f"({real.wasted_gbh:.1f} vs {static.wasted_gbh / 2:.1f} GiB·h: "
        f"{'met' if real.wasted_gbh < static.wasted_gbh / 2 else 'MISSED'}), kills on < 3 % of "
        f"units ({real.killed_pct:.2f} %: {'met' if real.killed_pct < 3 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
