"""Replay a memory trace through simrun's learner and the baselines users have today.

    python benchmarks/learning.py ../shared/traces/synthetic.csv ../shared/traces/campaign.csv
    python benchmarks/learning.py TRACE.csv --no-sizes     # the learner without input sizes
    python benchmarks/learning.py TRACE.csv --variant-from-input

Each row of a trace is a unit of a task whose inputs hold ``input_bytes``: simrun's
dispatcher measures a task's input size and the learner fits memory to it (``--no-sizes``
replays it blind to sizes). Units of one key submitted within 5 s of each other are one
task's batch; a trace's runs are separated by gaps of over an hour (the campaign has three).

Replay rules (/work/shared/traces/README.md): units are submitted in trace order; a unit's
request is decided when it is submitted (or resubmitted), from what is known then; its
measurement becomes known when it completes (submit time + its runtime). A unit whose
request is below its peak is killed for memory, charged request x its full runtime, and
resubmitted at once. Each policy is replayed on its own timeline, side by side in one run.

simrun's learner runs through the real `ResourceStore` (record/resolve on a temporary SQLite
file). The same replay through the pure `decide` on in-memory histories must give the very
same requests; the table says whether it did.

Probing (``simrun (probe first)``): the first batch of a key never seen sends
`simrun.core.sizing.probe_units` units alone (as the dispatcher does, with PROBE_PROCESSES
worker processes on the queue) and holds the rest until the probe's first report (a
success or a kill); the rest then get the learned request. The wait is charged: "h waited"
sums the hours the held units waited, and every figure counts the probe's kills.

Baselines:
- static preset: every unit asks for the preset; a killed unit is resubmitted at twice its
  last request (a user raising the preset by hand);
- Nextflow's idiom: ``memory = preset * task.attempt`` with ``errorStrategy 'retry'``;
- max seen: the largest peak completed so far for the key (the preset before any), and a
  kill doubles the key's level;
- VPA-like: the 90th percentile of the key's peaks, weighted by exponential decay (half-life
  24 h, the Kubernetes default), times 1.15; a kill adds a sample of max(1.2 x limit,
  limit + 100 MiB), and the killed unit is resubmitted at least at that bump;
- today's rule (v1): P95 (nearest rank) of the last 200 successes x 1.4, at least 2 x a
  pending kill's limit (what simrun shipped before learning v2);
- cold-start floor: the hint until a key's first success, the unit's true peak after (what
  no learner that waits for nothing can beat);
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

from simrun.core.reports import WorkerReport
from simrun.core.sizing import probe_units
from simrun.plugins import ResourceHint
from simrun.resources import MARGIN, RETRY_FACTOR, WINDOW, ResourceKey, ResourceStore
from simrun.resources.policy import KILL_Z, PRIOR_SPREAD, Observation, decide, percentile

MIB_IN_GB = 1 / 1024
MAX_ATTEMPTS = 60
#: Units of one key submitted within this of each other are one task's batch.
BATCH_GAP_S = 5.0
#: A gap in submissions longer than this starts the next run of the campaign.
RUN_GAP_S = 3600.0
#: The worker processes on the queue when the dispatcher decides a probe.
PROBE_PROCESSES = 4


@dataclass(frozen=True)
class Unit:
    index: int
    submit_s: float
    key: str
    peak_gb: float
    seconds: float
    preset_gb: float
    input_bytes: int
    run: int = 0


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
                text = row["key"]
                # a key without a model ("kind07") is a type run without a first source
                key = ResourceKey.from_text(text if "/" in text else f"{text}/")
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
    run, last_s = 0, None
    numbered: list[Unit] = []
    for u in units:
        if last_s is not None and u.submit_s - last_s > RUN_GAP_S:
            run += 1
        last_s = u.submit_s
        numbered.append(Unit(**{**u.__dict__, "run": run}))
    return numbered


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

    def __init__(self, store: ResourceStore, sizes: bool = True) -> None:
        self.store = store
        self.sizes = sizes
        self.requests: list[float] = []

    def _size(self, unit: Unit) -> int | None:
        return unit.input_bytes if self.sizes else None

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        key = ResourceKey.from_text(unit.key)
        resolved = await self.store.resolve(key, _hint(unit), None, self._size(unit))
        self.requests.append(resolved.memory_per_worker_gb)
        return resolved.memory_per_worker_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        report = WorkerReport(
            peak_memory_gb=(unit.peak_gb,),
            seconds_per_unit=unit.seconds,
            units=1,
            limit_gb=request_gb,
        )
        key = ResourceKey.from_text(unit.key)
        await self.store.record(
            key, report, 0.0, run=f"run{unit.run}", input_bytes=self._size(unit)
        )

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        report = WorkerReport(
            peak_memory_gb=(),
            seconds_per_unit=None,
            units=1,
            limit_gb=request_gb,
            killed_for_memory=True,
        )
        key = ResourceKey.from_text(unit.key)
        await self.store.record(
            key, report, 0.0, oom=True, run=f"run{unit.run}", input_bytes=self._size(unit)
        )


@dataclass
class SimrunPure(Static):
    """The same decisions from in-memory histories (the pure `decide`)."""

    sizes: bool = True
    name: str = "simrun (pure decide)"
    history: dict[str, list[Observation]] = field(default_factory=lambda: defaultdict(list))
    requests: list[float] = field(default_factory=list)

    def _size(self, unit: Unit) -> int | None:
        return unit.input_bytes if self.sizes else None

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        resolved = decide(self.history[unit.key], _hint(unit), None, input_bytes=self._size(unit))
        self.requests.append(resolved.memory_per_worker_gb)
        return resolved.memory_per_worker_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.history[unit.key].append(
            Observation(unit.peak_gb, False, unit.seconds, f"run{unit.run}", self._size(unit))
        )

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.history[unit.key].append(
            Observation(request_gb, True, None, f"run{unit.run}", self._size(unit))
        )


@dataclass
class OtherModels(SimrunPure):
    """Measured, not shipped (issue 13, item 4): a key with no success of its own starts
    from the successes of its type and variant on other models, their request widened by
    exp(KILL_Z x MODEL_SPREAD) (models of a type may differ by that much), still capped
    by the hint."""

    name: str = "simrun + other models"
    model_spread: float = 0.25

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        own = self.history[unit.key]
        key = ResourceKey.from_text(unit.key)
        if attempt > 1 or any(not o.oom for o in own):
            return await super().request(unit, attempt, now_s, last_gb)
        others = [
            o
            for text, history in self.history.items()
            if text != unit.key
            and (k := ResourceKey.from_text(text)).task_type == key.task_type
            and k.variant == key.variant
            for o in history
            if not o.oom
        ][-WINDOW:]
        if not others:
            return await super().request(unit, attempt, now_s, last_gb)
        borrowed = decide(others, ResourceHint(), None, input_bytes=self._size(unit))
        gb = min(
            unit.preset_gb, borrowed.memory_per_worker_gb * math.exp(KILL_Z * self.model_spread)
        )
        self.requests.append(gb)
        return gb


@dataclass
class UnitFloor(SimrunPure):
    """Measured, not shipped: the seed rule's kill floor on the killed unit's own retry only
    (at least RETRY_FACTOR x its last limit), not on every unit of the key while the kill
    is pending. The spec binds the seed rule; this row shows what it costs."""

    name: str = "v2, kill floor on its unit only"

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        history = self.history[unit.key]
        last = max((i for i, o in enumerate(history) if not o.oom), default=-1)
        without_pending = [o for i, o in enumerate(history) if i <= last or not o.oom]
        hint = _hint(unit)
        if not any(not o.oom for o in history):
            without_pending = history  # nothing succeeded yet: the kills are all there is
        got = decide(without_pending, hint, None, input_bytes=self._size(unit))
        gb = got.memory_per_worker_gb
        gb = max(gb, RETRY_FACTOR * last_gb) if attempt > 1 else gb
        self.requests.append(gb)
        return gb


class TodaysRule(Static):
    """Learning v1, as shipped before v2: P95 (nearest rank) of the last 200 successes x 1.4,
    at least 2 x the largest limit killed since the last success, at least 0.25 GiB."""

    name = "today's rule (v1)"

    def __init__(self) -> None:
        self.successes: dict[str, list[float]] = defaultdict(list)
        self.pending: dict[str, list[float]] = defaultdict(list)

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        window = self.successes[unit.key][-200:]
        kills = self.pending[unit.key]
        if window:
            got = max(percentile(window, 95) * 1.4, 0.25)
            return max(got, 2.0 * max(kills)) if kills else got
        return max(unit.preset_gb, 2.0 * max(kills)) if kills else unit.preset_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.successes[unit.key].append(unit.peak_gb)
        self.pending[unit.key].clear()

    async def kill(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.pending[unit.key].append(request_gb)


class ColdStartFloor(Static):
    """The hint until a key's first success, the unit's own peak after (retries of a unit
    killed at the hint double, as the static preset's)."""

    name = "cold-start floor"

    def __init__(self) -> None:
        self.known: set[str] = set()

    async def request(self, unit: Unit, attempt: int, now_s: float, last_gb: float) -> float:
        if unit.key in self.known:
            return max(unit.peak_gb, last_gb * 2 if attempt > 1 else 0.0)
        return unit.preset_gb if attempt == 1 else 2 * last_gb

    async def success(self, unit: Unit, request_gb: float, now_s: float) -> None:
        self.known.add(unit.key)


# -- the replay ------------------------------------------------------------------------------


@dataclass
class Tally:
    requested_gbh: float = 0.0
    used_gbh: float = 0.0
    kills: int = 0
    killed: set[int] = field(default_factory=set)
    lost_h: float = 0.0
    waited_h: float = 0.0
    units: int = 0

    @property
    def wasted_gbh(self) -> float:
        wasted = self.requested_gbh - self.used_gbh
        return 0.0 if abs(wasted) < 1e-6 * max(self.requested_gbh, 1.0) else wasted

    @property
    def killed_pct(self) -> float:
        return 100 * len(self.killed) / self.units if self.units else 0.0


@dataclass
class Outcome(Tally):
    name: str = ""
    runs: dict[int, Tally] = field(default_factory=dict)

    @property
    def killed_units(self) -> int:
        return len(self.killed)


def batches(units: Sequence[Unit]) -> list[list[Unit]]:
    """Units of one key submitted within BATCH_GAP_S of each other, in submit order."""
    out: list[list[Unit]] = []
    last: dict[str, list[Unit]] = {}
    for u in units:
        open_batch = last.get(u.key)
        if open_batch is not None and u.submit_s - open_batch[-1].submit_s <= BATCH_GAP_S:
            open_batch.append(u)
        else:
            last[u.key] = [u]
            out.append(last[u.key])
    return out


async def replay(
    units: Sequence[Unit], policy: Policy, probe: bool = False, probe_whole: bool = True
) -> Outcome:
    """Run ``units`` through ``policy`` on an event timeline; completions at an instant are
    known before the submissions of that instant. With ``probe``, the first batch of a key
    never seen sends `probe_units` units alone and holds the rest (and the key's later
    batches) until the probe reported: every probe unit with ``probe_whole``, else its
    first."""
    out = Outcome(name=policy.name, units=len(units))
    for u in units:
        out.runs.setdefault(u.run, Tally()).units += 1
    order = itertools.count()
    # (time, phase, seq, units, attempt, request): phase 0 = completion, 1 = submission;
    # a group of several units is a batch (phase 2) whose probe is decided when it arrives
    events: list[tuple[float, int, int, list[Unit], int, float]] = [
        (b[0].submit_s, 2 if len(b) > 1 else 1, next(order), b, 1, 0.0)
        for b in (batches(units) if probe else [[u] for u in units])
    ]
    heapq.heapify(events)
    seen: set[str] = set()
    held: dict[str, list[Unit]] = {}
    probing: dict[str, int] = {}
    free: set[int] = set()  # units that go out when they arrive (the probe's)
    done = 0
    while events:
        now_s, phase, _, group, attempt, request_gb = heapq.heappop(events)
        key = group[0].key
        if phase == 2:
            first_time = probe and key not in seen and key not in held
            size = probe_units(len(group), PROBE_PROCESSES, None) if first_time else 0
            seen.add(key)
            if size:
                probing[key] = size if probe_whole else 1
                held[key] = list(group[size:])
                group = group[:size]
                free.update(u.index for u in group)
            for unit in group:  # each unit arrives at its own time
                heapq.heappush(events, (unit.submit_s, 1, next(order), [unit], 1, 0.0))
            continue
        if phase == 1:
            if attempt == 1 and key in held and group[0].index not in free:
                held[key].extend(group)  # arrives while the key's probe runs: waits too
                continue
            seen.add(key)
            for unit in group:
                gb = await policy.request(unit, attempt, now_s, request_gb)
                if not gb > 0:
                    raise RuntimeError(f"{policy.name} requested {gb} GiB for unit {unit}")
                for t in (out, out.runs[unit.run]):
                    t.requested_gbh += gb * unit.seconds / 3600
                    if attempt == 1:
                        t.waited_h += max(0.0, now_s - unit.submit_s) / 3600
                heapq.heappush(events, (now_s + unit.seconds, 0, next(order), [unit], attempt, gb))
            continue
        unit = group[0]
        if request_gb >= unit.peak_gb:
            done += 1
            for t in (out, out.runs[unit.run]):
                t.used_gbh += unit.peak_gb * unit.seconds / 3600
            await policy.success(unit, request_gb, now_s)
        else:
            for t in (out, out.runs[unit.run]):
                t.kills += 1
                t.lost_h += unit.seconds / 3600
                t.killed.add(unit.index)
            if attempt >= MAX_ATTEMPTS:
                raise RuntimeError(f"{policy.name}: unit {unit.index} killed {attempt} times")
            await policy.kill(unit, request_gb, now_s)
            heapq.heappush(events, (now_s, 1, next(order), [unit], attempt + 1, request_gb))
        if key in probing and attempt == 1:
            probing[key] -= 1
            if probing[key] <= 0:  # the probe reported: the rest goes out with what was learned
                del probing[key]
                rest = held.pop(key, [])
                free.update(u.index for u in rest)
                if rest:
                    heapq.heappush(events, (now_s, 1, next(order), rest, 1, 0.0))
    if done != len(units):
        raise RuntimeError(f"{policy.name}: {len(units) - done} units never succeeded")
    return out


def print_table(outcomes: Sequence[Outcome], static: Outcome) -> None:
    head = (
        f"{'policy':<30} {'requested GiB·h':>15} {'wasted GiB·h':>13} {'x preset':>9} "
        f"{'units killed':>14} {'kills':>6} {'h lost':>8} {'h waited':>9}"
    )
    print(head)
    print("-" * len(head))
    for o in outcomes:
        ratio = o.wasted_gbh / static.wasted_gbh if static.wasted_gbh else float("nan")
        print(
            f"{o.name:<30} {o.requested_gbh:>15.1f} {o.wasted_gbh:>13.1f} {ratio:>9.3f} "
            f"{o.killed_units:>6} ({o.killed_pct:4.2f}%) {o.kills:>6} {o.lost_h:>8.1f} "
            f"{o.waited_h:>9.1f}"
        )
    if len(static.runs) > 1:
        print()
        print("per run: wasted x preset / units killed % / h lost")
        for o in outcomes:
            parts = []
            for run in sorted(o.runs):
                t, base = o.runs[run], static.runs[run]
                parts.append(
                    f"run {run + 1}: {t.wasted_gbh / base.wasted_gbh:.3f} / "
                    f"{t.killed_pct:.2f}% / {t.lost_h:.1f}"
                )
            print(f"  {o.name:<30} " + "   ".join(parts))


async def trace_table(units: Sequence[Unit], sizes: bool) -> dict[str, Outcome]:
    with tempfile.TemporaryDirectory() as tmp:
        async with ResourceStore(Path(tmp) / "replay.db") as store:
            simrun_store = SimrunStore(store, sizes)
            start = time.perf_counter()
            real = await replay(units, simrun_store)
            store_s = time.perf_counter() - start
    pure_policy = SimrunPure(sizes)
    pure = await replay(units, pure_policy)
    same = simrun_store.requests == pure_policy.requests and (real.kills, real.requested_gbh) == (
        pure.kills,
        pure.requested_gbh,
    )
    probed = await replay(units, SimrunPure(sizes, name="simrun (probe first)"), probe=True)
    other_models = await replay(units, OtherModels(sizes))
    unit_floor = await replay(units, UnitFloor(sizes), probe=True)
    first = await replay(
        units,
        SimrunPure(sizes, name="simrun (probe, first report)"),
        probe=True,
        probe_whole=False,
    )
    baselines = [
        await replay(units, p())
        for p in (Static, Nextflow, MaxSeen, VpaLike, TodaysRule, ColdStartFloor, Oracle)
    ]
    print(
        f"{len(units)} units, {len({u.key for u in units})} keys, {len(real.runs)} run(s); "
        f"input sizes {'used' if sizes else 'not used'}; WINDOW={WINDOW}, MARGIN={MARGIN}, "
        f"RETRY_FACTOR={RETRY_FACTOR}, KILL_Z={KILL_Z}, PRIOR_SPREAD={PRIOR_SPREAD}; probe with "
        f"{PROBE_PROCESSES} processes"
    )
    print(
        f"ResourceStore replay: {len(simrun_store.requests)} resolves in {store_s:.1f} s; "
        f"same requests as the pure decide: {'yes' if same else 'NO'}"
    )
    print()
    real.name = "simrun v2 (ResourceStore)"
    outcomes = [real, probed, first, other_models, unit_floor, *baselines]
    print_table(outcomes, baselines[0])
    if not same:
        raise SystemExit("the ResourceStore and the pure decide disagree")
    return {o.name: o for o in outcomes}


def verdict(by_name: dict[str, Outcome]) -> None:
    static = by_name["static preset"]
    today = by_name["today's rule (v1)"]
    print()
    for name in ("simrun v2 (ResourceStore)", "simrun (probe first)"):
        o = by_name[name]
        ratio = o.wasted_gbh / static.wasted_gbh
        better = [
            b.name
            for b in by_name.values()
            if not b.name.startswith(("simrun", "oracle", "cold-start"))
            and (o.wasted_gbh < b.wasted_gbh or o.killed_pct > b.killed_pct)
            and o.killed_pct <= b.killed_pct + 1e-9
        ]
        print(
            f"{name}: wasted x{ratio:.3f} of the preset (target <= 0.30: "
            f"{'met' if ratio <= 0.30 else 'MISSED'}); {o.killed_pct:.2f} % of units killed "
            f"(target <= 1 %: {'met' if o.killed_pct <= 1 else 'MISSED'}); {o.lost_h:.1f} h "
            f"lost vs today's {today.lost_h:.1f} h "
            f"({'fewer' if o.lost_h < today.lost_h else 'NOT fewer'}); "
            f"better on waste at equal or lower kill rate than {len(better)} of 5 baselines"
        )
    if len(static.runs) > 2:
        o = by_name["simrun (probe first)"]
        last = max(o.runs)
        ratio = o.runs[last].wasted_gbh / static.runs[last].wasted_gbh
        print(
            f"campaign's run {last + 1} (probe first): wasted x{ratio:.3f} of the preset "
            f"(target <= 0.15: {'met' if ratio <= 0.15 else 'MISSED'})"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "traces", type=Path, nargs="+", help="trace CSV (see ../shared/traces/README.md)"
    )
    parser.add_argument(
        "--variant-from-input",
        action="store_true",
        help="put the log2 bucket of input_bytes into the key's variant",
    )
    parser.add_argument("--no-sizes", action="store_true", help="the learner ignores input sizes")
    parser.add_argument("--limit", type=int, default=None, help="replay the first N rows only")
    args = parser.parse_args(argv)
    for trace in args.traces:
        if not trace.is_file():
            parser.error(f"no trace file at {trace}")
        units = load_trace(trace, args.variant_from_input, args.limit)
        if not units:
            parser.error(f"{trace} has no rows")
        print(f"== trace {trace}{' (variant from input_bytes)' if args.variant_from_input else ''}")
        by_name = asyncio.run(trace_table(units, not args.no_sizes))
        verdict(by_name)
        print()


if __name__ == "__main__":
    main()
