"""The controller's own pure decisions (simrun.service.decisions), on tables of cases."""

from __future__ import annotations

import pytest

from simrun.service.decisions import (
    FlightJob,
    abandoned_jobs,
    attempts_verdict,
    dead_worker_jobs,
    failure_message,
    job_attempt,
    judging_workers,
    lost_jobs,
    reconnect_grace_s,
    run_of_job,
)


@pytest.mark.parametrize(("attempts", "expected"), [([0, 0], 1), ([0, 3, 1], 4), ([2], 3), ([], 1)])
def test_job_attempt(attempts, expected):
    """A job's attempt is above every one of its units' attempts."""
    assert job_attempt(attempts) == expected


JOBS = [
    FlightJob("a", None, 10.0),  # queued, never seen on a worker
    FlightJob("b", "w1", 10.0),  # held by w1
    FlightJob("c", "w2", 10.0),  # held by w2
    FlightJob("d", None, 30.0),  # enqueued after the snapshot
]


def test_dead_worker_jobs():
    """Jobs held by a worker whose heartbeat is gone are given up; others are not."""
    assert dead_worker_jobs(JOBS, {"w1"}) == ["c"]
    assert dead_worker_jobs(JOBS, {"w1", "w2"}) == []


@pytest.mark.parametrize(
    ("held", "listed", "since", "now", "watched", "abandoned"),
    [
        ({"a"}, set(), {}, 100.0, {"a": 100.0}, []),  # first seen: watched from now
        ({"a"}, set(), {"a": 100.0}, 100.9, {"a": 100.0}, []),  # within a heartbeat's life
        ({"a"}, set(), {"a": 100.0}, 101.0, {"a": 100.0}, []),  # exactly one: not longer
        ({"a"}, set(), {"a": 100.0}, 101.5, {}, ["a"]),  # longer: abandoned
        ({"a"}, {"a"}, {"a": 100.0}, 105.0, {}, []),  # a live worker lists it
        (set(), set(), {"a": 100.0}, 105.0, {}, []),  # no longer held (it ended)
        ({"a"}, set(), {}, 105.0, {"a": 105.0}, []),  # was listed (so not watched): starts over
        (
            {"a", "b", "c"},
            {"b"},
            {"a": 100.0, "b": 90.0, "c": 104.5},
            105.0,
            {"c": 104.5},
            ["a"],
        ),
    ],
)
def test_abandoned_jobs(held, listed, since, now, watched, abandoned):
    """A job arq holds in progress that no live worker lists is abandoned once it stayed so
    for longer than a heartbeat lives (here 1 s) without a break; until then it is watched
    from when it was first seen so, and a job listed again or no longer held starts over."""
    assert abandoned_jobs(held, listed, since, now, ttl_s=1.0) == (watched, abandoned)


@pytest.mark.parametrize(
    ("queued", "on_workers", "lost"),
    [
        ({"a", "b", "c"}, set(), []),
        (set(), {"b", "c"}, ["a"]),  # Redis lost the queue: a is gone
        (set(), set(), ["a", "b", "c"]),  # and nobody holds anything (d is too young)
        ({"a"}, {"c"}, ["b"]),
    ],
)
def test_lost_jobs(queued, on_workers, lost):
    """A job older than the snapshot that is neither queued nor on a live worker is lost."""
    assert lost_jobs(JOBS, queued, on_workers, snapshot_s=20.0) == lost


@pytest.mark.parametrize(
    ("state", "in_flight", "in_redis", "verdict"),
    [
        ("running", False, False, "keep"),  # the run goes on: its hashes matter
        ("running", True, True, "keep"),
        ("succeeded", False, False, "forget"),
        ("failed", False, False, "forget"),  # a replay writes them again before enqueueing
        ("cancelled", False, False, "forget"),  # the workers skipped every stale job
        ("cancelled", False, True, "wait"),  # stale jobs still queued: they need the attempts
        ("succeeded", False, True, "wait"),  # its last job not yet out of arq's queue
        ("failed", True, False, "wait"),  # a job still in flight in the store
        (None, False, False, "forget"),  # a run the store does not know, nothing left
        (None, False, True, "wait"),  # ... but a job of it may still run
    ],
)
def test_attempts_verdict(state, in_flight, in_redis, verdict):
    """A run's attempts hashes may leave Redis only once the run ended (or is unknown to
    the store) and no job of it is in flight nor in Redis; a running run keeps them."""
    assert attempts_verdict(state, in_flight, in_redis) == verdict


@pytest.mark.parametrize(
    ("job_id", "run"),
    [
        ("20250101-120000-1a2b3c:sweep:12:3", "20250101-120000-1a2b3c"),
        ("20250101-120000-1a2b3c:sweep:merge:1", "20250101-120000-1a2b3c"),
        ("r:a:b:command:2", "r"),  # whatever the task's name holds
    ],
)
def test_run_of_job(job_id, run):
    """The run of a job id is what comes before its first colon."""
    assert run_of_job(job_id) == run


def test_failure_message_lists_units():
    """A failed run's message counts and lists its failed units per task, as ranges."""
    message = failure_message({"sweep": [3, 7, 8, 9], "summary": ["command"]})
    assert message == "5 units failed: summary [command], sweep [3, 7-9]"
    assert failure_message({"a": ["merge"]}) == "1 unit failed: a [merge]"


@pytest.mark.parametrize(
    ("now_s", "back_at", "grace_s", "judge"),
    [
        (100.0, None, 13.0, True),  # Redis never went away
        (100.0, 100.0, 13.0, False),  # just back: every heartbeat expired meanwhile
        (112.9, 100.0, 13.0, False),  # a worker may still be trying to come back
        (113.0, 100.0, 13.0, True),  # grace over: a worker still silent is dead
        (500.0, 100.0, 13.0, True),
        (100.0, 100.0, 0.0, True),  # no grace asked for
    ],
)
def test_judging_workers(now_s, back_at, grace_s, judge):
    """After Redis comes back, workers are not judged by their heartbeats (dead workers,
    abandoned and lost jobs) until the grace has passed."""
    assert judging_workers(now_s, back_at, grace_s) is judge


def test_reconnect_grace_covers_a_worker_retry_and_a_heartbeat():
    """The grace is a worker's longest pause between two tries plus a heartbeat TTL."""
    assert reconnect_grace_s(8.0, 5.0) == 13.0
