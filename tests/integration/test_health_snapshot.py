"""``GET /health`` answers from the controller's memory: the snapshot its loop refreshes
each step, its link to Redis and its ``problems``; never a Redis or SQLite call of its own."""

from __future__ import annotations

import dataclasses
import logging

import httpx
import pytest

from simrun.service.controller import Controller
from simrun.service.routes import monitoring
from tests.support.heartbeats import worker_info

pytestmark = pytest.mark.redis


async def test_health_asks_neither_redis_nor_sqlite(
    controller: Controller, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the loop stepped, /health answers with the live workers it saw while every
    Redis and SQLite read fails: it reads neither."""
    queue = controller.queue
    info = worker_info("w1")
    await queue.redis.set(queue.keys.worker("w1"), info.to_json(), px=60_000)
    await queue.redis.zadd(queue.keys.workers, {"w1": 1.0})
    await controller.step()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("/health read Redis or SQLite")

    monkeypatch.setattr(type(queue.pool), "execute_command", refuse)
    monkeypatch.setattr(type(controller.store), "run", refuse)
    monkeypatch.setattr(type(controller.store), "runs", refuse)
    body = (await api.get("/health")).json()
    assert (body["ok"], body["status"], body["redis"], body["workers"]) == (
        True, "ok", "ok", 1,
    )  # fmt: skip
    assert body["problems"] == {}


async def test_problems_make_health_degraded_until_cleared(
    controller: Controller, api: httpx.AsyncClient
) -> None:
    """A problem set on the controller turns /health to ok false, status degraded, listing
    it, still HTTP 200 with Redis up; cleared, /health is ok again."""
    await controller.step()
    controller.problems["disk"] = "the store's disk is 99% full"
    answer = await api.get("/health")
    assert answer.status_code == 200
    body = answer.json()
    assert (body["ok"], body["status"], body["redis"]) == (False, "degraded", "ok")
    assert body["problems"] == {"disk": "the store's disk is 99% full"}
    del controller.problems["disk"]
    assert (await api.get("/health")).json()["ok"] is True


async def test_a_stale_snapshot_is_a_problem(
    controller: Controller, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot older than `STALE_HEALTH_S` (the loop stuck) makes /health degraded with
    the problem ``controller``."""
    await controller.step()
    monkeypatch.setattr(monitoring, "STALE_HEALTH_S", 0.0)
    snapshot = controller.health
    assert snapshot is not None
    controller.health = dataclasses.replace(snapshot, at_s=snapshot.at_s - 1.0)
    body = (await api.get("/health")).json()
    assert body["status"] == "degraded"
    assert "has not stepped" in body["problems"]["controller"]


async def test_a_skewed_worker_is_shown_and_warned_once(
    controller: Controller, api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A heartbeat whose clock is 45 s behind Redis's shows ``clock_skew_s`` and a
    ``clock_warning`` in /workers; the controller logs one warning for it over steps, and
    none for a worker within the bound."""
    caplog.set_level(logging.WARNING)
    queue = controller.queue
    for worker_id, skew in (("late", -45.0), ("fine", 0.2)):
        info = worker_info(worker_id, clock_skew_s=skew)
        await queue.redis.set(queue.keys.worker(worker_id), info.to_json(), px=60_000)
        await queue.redis.zadd(queue.keys.workers, {worker_id: 1.0})
    await controller.step()
    await controller.step()
    workers = {w["id"]: w for w in (await api.get("/workers")).json()["workers"]}
    assert workers["late"]["clock_skew_s"] == -45.0
    assert "45.0 s behind" in workers["late"]["clock_warning"]
    assert workers["fine"]["clock_warning"] is None
    lines = [r.getMessage() for r in caplog.records if "behind Redis" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "late" in lines[0], lines
