"""Fixtures of the integration tests: a real controller (real Redis, real SQLite), the real
FastAPI app over it through httpx's ASGI transport, and a job queue on a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from simrun.queues.client import JobQueue
from simrun.service.controller import Controller
from simrun.service.routes import create_app
from tests.support.keys import TEST_KEY
from tests.support.service_harness import TYPES, settings


@pytest.fixture
async def controller(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> AsyncIterator[Controller]:
    """A controller on a fresh store; its loop is not running (tests step it)."""
    ctl = await Controller.open(settings(tmp_path / "store", redis_url, redis_prefix), TYPES)
    try:
        yield ctl
    finally:
        await ctl.close()


@pytest.fixture
async def api(controller: Controller) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the app over ``controller``, without a token."""
    transport = httpx.ASGITransport(app=create_app(controller))
    async with httpx.AsyncClient(transport=transport, base_url="http://simrun") as client:
        yield client


@pytest.fixture
async def queue(redis_url: str, redis_prefix: str) -> AsyncIterator[JobQueue]:
    """A job queue of this test's key prefix, signing with the tests' key."""
    q = await JobQueue.connect(redis_url, redis_prefix, key=TEST_KEY)
    try:
        yield q
    finally:
        await q.close()
