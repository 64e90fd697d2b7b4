"""Shared fixtures and settings. Tests are split by what they need: ``unit/`` (nothing, no
I/O), ``integration/`` (SQLite, a real Redis server, subprocesses), ``e2e/`` (real service
and worker processes).

Redis: each test process (each pytest-xdist worker) starts one private ``redis-server``
(`simrun.local.redis.PrivateRedis`) for its whole session; ``SIMRUN_TEST_REDIS_URL`` points
the tests at another server instead, which they never flush. Either way every test uses its
own key prefix (`redis_prefix`), so tests never see each other's keys. A test that flushes,
stops or measures a server takes one of its own (`private_redis`).

Hypothesis: the profile ``quick`` (the default) tries fewer examples than ``thorough``
(CI, ``.ci/run``); ``SIMRUN_HYPOTHESIS_PROFILE`` chooses. The same tests run under both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from simrun.local.redis import PrivateRedis
from tests.support.redis_server import given_url, key_prefix, start_private_redis

#: The environment variable that chooses the Hypothesis profile.
PROFILE_ENV = "SIMRUN_HYPOTHESIS_PROFILE"
#: Examples of a property under ``thorough``: Hypothesis's own default, what the tests always
#: ran; a test that sets its own count scales it with `tests.support.examples.examples`.
#: No deadline in either: a test asserts no time on this shared, noisy machine (an example
#: that took 200 ms under load is not a failure); speed is measured in benchmarks/.
settings.register_profile("thorough", max_examples=100, deadline=None)
#: A quarter of that for the edit-test loop.
settings.register_profile("quick", max_examples=25, deadline=None)
settings.load_profile(os.environ.get(PROFILE_ENV, "quick"))


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of this test process's Redis server: the one ``SIMRUN_TEST_REDIS_URL`` gives
    (never flushed), else a private one for the session."""
    url = given_url()
    if url:
        yield url
        return
    server = start_private_redis()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A ``redis-server`` of this test alone, which it may flush, stop or measure."""
    server = start_private_redis()
    yield server
    server.stop()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test alone, so tests never see each other's keys."""
    return key_prefix()
