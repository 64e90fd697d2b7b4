"""The job key of tests that run a worker or read reports without a store of their own."""

from __future__ import annotations

from simrun.core.signing import JobKey

#: Its text, for a child process's ``SIMRUN_JOB_KEY``.
TEST_KEY_TEXT = "simrun-tests-" + "0123456789abcdef" * 3
TEST_KEY = JobKey.parse(TEST_KEY_TEXT.encode(), "the tests' key")
#: The environment that gives a child process the tests' key.
TEST_KEY_ENV = {"SIMRUN_JOB_KEY": TEST_KEY_TEXT}
