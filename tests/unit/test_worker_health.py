"""The container health check's decisions: which heartbeat is this container's, and is it
fresh enough; on tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from simrun.core.reports import WorkerInfo
from simrun.worker.health import candidate_ids, judge, judge_local, same_host
from tests.support.heartbeats import worker_info

NOW = 1_000_000.0


def beat(
    worker_id: str = "box-7-abc123", host: str = "box", age_s: float = 1.0, stopping: bool = False
) -> WorkerInfo:
    return worker_info(
        worker_id, memory_gb=16.0, processes=4, free_memory_gb=8.0, free_processes=3,
        host=host, pid=7, started=NOW - 100, updated=NOW - age_s, stopping=stopping,
    )  # fmt: skip


@dataclass(frozen=True)
class Case:
    beats: tuple[WorkerInfo, ...]
    worker_id: str | None
    healthy: bool
    says: str
    max_age_s: float = 30.0


CASES = {
    "no heartbeat at all": Case((), None, False, "no heartbeat of a worker on host 'box'"),
    "only other hosts' heartbeats": Case(
        (beat("other-1-a", "other"),), None, False, "no heartbeat of a worker on host 'box'"
    ),
    "this host's fresh heartbeat": Case((beat(),), None, True, "ok: worker box-7-abc123 on box"),
    "this host's stale heartbeat": Case((beat(age_s=31),), None, False, "stale:"),
    "exactly at the limit is fresh": Case((beat(age_s=30),), None, True, "30.0 s old"),
    "a tighter limit": Case((beat(age_s=6),), None, False, "more than 5 s", max_age_s=5),
    "a clock slightly behind counts as age 0": Case((beat(age_s=-2),), None, True, "0.0 s old"),
    "the newest of this host's heartbeats decides": Case(
        (beat("box-1-old", age_s=300), beat("box-2-new", age_s=2)), None, True, "box-2-new"
    ),
    "a stale one beside a fresh one of another host": Case(
        (beat(age_s=300), beat("far-1-x", "far", age_s=1)), None, False, "stale:"
    ),
    "the full host name matches the short one": Case(
        (beat(host="box.cluster.local"),), None, True, "ok:"
    ),
    "an explicit id is looked up by id": Case(
        (beat("w1", host="elsewhere"),), "w1", True, "ok: worker w1 on elsewhere"
    ),
    "an explicit id that has no heartbeat": Case(
        (beat(),), "w9", False, "no heartbeat of worker 'w9'"
    ),
    "a stopping worker that still beats is healthy": Case(
        (beat(stopping=True),), None, True, "stopping"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_judge(case: Case) -> None:
    """Healthy exactly when this container's newest heartbeat is at most max_age_s old;
    "this container's" is the explicit id, else the heartbeats written from this host."""
    verdict = judge(
        case.beats, host="box", worker_id=case.worker_id, now=NOW, max_age_s=case.max_age_s
    )
    assert verdict.healthy is case.healthy
    assert case.says in verdict.message


HOSTS = [
    ("box", "box", True),
    ("box", "BOX", True),
    ("box.example.org", "box", True),
    ("box", "box.example.org", True),
    ("box", "boxer", False),
    ("box-2", "box", False),
    ("", "", False),
]


@pytest.mark.parametrize(("a", "b", "same"), HOSTS)
def test_same_host(a: str, b: str, same: bool) -> None:
    """Host names match case-insensitively, a full name matches its short form, and an
    empty name matches nothing."""
    assert same_host(a, b) is same


ORDERS = [
    ([], "box", []),
    (["a-1-x", "box-1-y", "b-2-z", "box-3-w"], "box", ["box-1-y", "box-3-w", "a-1-x", "b-2-z"]),
    (["boxer-1-x", "box-2-y"], "box", ["box-2-y", "boxer-1-x"]),  # a longer name is not ours
    (["w1", "w2"], "box", ["w1", "w2"]),
]


@pytest.mark.parametrize(("ids", "host", "order"), ORDERS)
def test_candidate_ids(ids: list[str], host: str, order: list[str]) -> None:
    """Ids of this host's default form ``<host>-…`` are read first, every id exactly once."""
    assert candidate_ids(ids, host) == order


def status(redis: str = "down", age_s: float = 1.0, **more: object) -> dict[str, object]:
    return {
        "updated": NOW - age_s, "redis": redis, "where": "redis://r:6379/0", "down_s": 42.0,
        "reason": "Connection refused", "kept_reports": 3, "prefix": "simrun", **more,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("statuses", "says"),
    [
        ([], None),  # no status file: ask Redis
        ([status("up")], None),  # Redis up: the heartbeat decides
        ([status(age_s=31)], None),  # stale: the worker's loop may be stuck
        ([status()], "waiting for Redis at redis://r:6379/0 for 42 s (3 reports kept)"),
        ([status(age_s=30)], "waiting for Redis"),  # at the limit is fresh
        ([status(down_s=None)], "waiting for Redis at redis://r:6379/0 (3 reports kept)"),
        ([status("up", age_s=1), status(age_s=5)], None),  # the newest decides
        ([status("up", age_s=5), status(age_s=1)], "waiting for Redis"),
        ([{"redis": "down"}], None),  # no time: not believed
        ([status(prefix="other")], None),  # another worker's, sharing the directory
        ([status(prefix="other", age_s=1), status(age_s=5)], "waiting for Redis"),
    ],
)
def test_judge_local(statuses: list[dict[str, object]], says: str | None) -> None:
    """A fresh status file of a worker of the checked key prefix that says Redis is down
    makes the check healthy, "waiting for Redis"; otherwise the heartbeat in Redis decides."""
    verdict = judge_local(statuses, now=NOW, prefix="simrun")
    if says is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert verdict.healthy
        assert verdict.message.startswith(says)
