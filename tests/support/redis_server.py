"""The tests' Redis servers: one `PrivateRedis` per test process (each pytest-xdist worker
has its own), or the server ``SIMRUN_TEST_REDIS_URL`` names, which is never flushed; and
key prefixes that keep tests apart on either."""

from __future__ import annotations

import os
import uuid

import pytest

from simrun.local.machine import LocalError
from simrun.local.redis import PrivateRedis

#: A Redis server the tests use instead of starting their own; they never flush it.
GIVEN_URL_ENV = "SIMRUN_TEST_REDIS_URL"


def given_url() -> str | None:
    """The URL of the server the environment gives the tests, if any."""
    return os.environ.get(GIVEN_URL_ENV) or None


def start_private_redis() -> PrivateRedis:
    """A started `PrivateRedis` (the test fails, saying why, when none can start)."""
    server = PrivateRedis()
    try:
        server.start()
    except LocalError as error:
        pytest.fail(str(error))
    return server


def key_prefix(tag: str = "test") -> str:
    """A Redis key prefix no other test uses, on any server and in any test process."""
    return f"simrun-{tag}-{uuid.uuid4().hex[:10]}"
