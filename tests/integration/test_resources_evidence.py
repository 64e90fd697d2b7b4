"""`ResourceStore.evidence` on a real SQLite file: what ``simrun resources KEY`` shows of a
key is what the store has recorded, and its explanation is the policy's on the very history
a dispatch resolves from."""

from __future__ import annotations

import json
import time
from pathlib import Path

from simrun.plugins import ResourceHint
from simrun.resources import WINDOW, ResourceKey, ResourceStore
from simrun.resources.policy import explain
from simrun.resources.store import EVIDENCE_KILLS, Record
from tests.support.reports import killed, success

KEY = ResourceKey("heat", "plate", "64")
OTHER = ResourceKey("heat", "plate", "128")
HINT = ResourceHint(memory_base_gb=1.0, memory_per_worker_gb=4.0)


async def test_evidence_lists_the_window_the_kills_and_the_policys_explanation(
    tmp_path: Path,
) -> None:
    """The peaks are the window's successes oldest first (older successes and kills left
    out), each with the time it was recorded, the kills are the latest `EVIDENCE_KILLS` of
    the key oldest first with their limits and times, the count is every observation, and
    the explanation is the policy's on the history the store resolves from (its request is
    what `resolve` requests)."""
    async with ResourceStore(tmp_path / "simrun.db") as store:
        before = time.time()
        for i in range(EVIDENCE_KILLS + 2):  # kills older than the window
            await store.record(KEY, killed(0.5 + i / 100), 1.0, oom=True, run="r0")
        old = [Record(KEY, success(100.0 + i), 1.0, run="r1") for i in range(5)]
        window = [0.1 * (i + 1) for i in range(WINDOW)]
        fresh = [Record(KEY, success(p), 1.0, run=f"r{2 + i % 3}") for i, p in enumerate(window)]
        await store.record_many([*old, *fresh])
        await store.record(KEY, killed(3.0), 1.0, oom=True, run="r9")  # a pending kill
        await store.record(OTHER, success(9.0), 1.0, run="r1")  # another key: not counted
        after = time.time()

        got = await store.evidence(KEY, HINT)
        assert got.key == KEY
        assert got.peaks_gb == tuple(window)
        assert len(got.peaks_s) == len(window)  # each peak's time, for the plot's time axis
        assert list(got.peaks_s) == sorted(got.peaks_s)
        assert before <= got.peaks_s[0] <= got.peaks_s[-1] <= after
        limits = [*(0.5 + i / 100 for i in range(3, EVIDENCE_KILLS + 2)), 3.0]
        assert [gb for _, gb in got.kills] == limits
        times = [s for s, _ in got.kills]
        assert times == sorted(times)
        assert before <= times[0] <= times[-1] <= after
        assert got.observations == EVIDENCE_KILLS + 2 + 5 + WINDOW + 1
        history = await store.history(KEY)
        assert got.explanation == explain(history, HINT)
        resolved = await store.resolve(KEY, HINT, None)
        assert got.explanation.requested_gb == resolved.memory_per_worker_gb
        assert got.explanation.source == resolved.source
        assert got.explanation.kill_floor_gb is not None  # the kill after the last success

        data = json.loads(json.dumps(got.to_dict()))  # plain JSON, the key as its text
        assert data["key"] == "heat/plate/64"
        assert data["peaks_gb"] == list(window)
        assert data["peaks_s"] == list(got.peaks_s)
        assert data["kills"][-1][1] == 3.0
        assert data["explanation"]["requested_gb"] == resolved.memory_per_worker_gb
        assert data["explanation"]["reasons"] == list(got.explanation.reasons)


async def test_an_unknown_key_has_no_observations_and_the_hints_request(tmp_path: Path) -> None:
    """A key never recorded has no observations, peaks or kills; its request is the hint."""
    async with ResourceStore(tmp_path / "simrun.db") as store:
        await store.record(KEY, success(1.0), 1.0, run="r1")
        got = await store.evidence(OTHER, HINT)
    assert (got.observations, got.peaks_gb, got.kills) == (0, (), ())
    assert got.explanation.requested_gb == HINT.memory_per_worker_gb
    assert got.explanation.source == "plugin hint"
