"""One service per store and per Redis key prefix: a second `simrun service` on the same
store, or on the same Redis and prefix, is refused at start naming the first; a service
killed with SIGKILL leaves neither in the way of the next (the store's lock goes with its
process, the Redis claim of a process gone on this host is taken over, one of another host
once it expired); a clean stop deletes the claim."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis
from simrun.queues.keys import Keys
from tests.support.cli_harness import (
    WORK,
    clean_env,
    simrun,
    simrun_exe,
    start_simrun,
    stop_process,
    wait_for_service,
    write_work,
)
from tests.support.redis_server import key_prefix
from tests.support.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("service-alone")]


class Services:
    """Starts `simrun service` processes on one Redis; stops them all at the end."""

    def __init__(self, home: Path, redis_url: str) -> None:
        self.home, self.redis_url = home, redis_url
        self.started: list[subprocess.Popen[str]] = []

    def args(self, store: Path, prefix: str, *more: str) -> list[str]:
        return [
            "service", "--port", str(free_port()), "--redis-url", self.redis_url,
            "--prefix", prefix, "--store", str(store), "--plugins", WORK, *more,
        ]  # fmt: skip

    def start(self, store: Path, prefix: str, *more: str) -> tuple[subprocess.Popen[str], str]:
        """A service that answers: its process and URL."""
        args = self.args(store, prefix, *more)
        proc = start_simrun(*args, cwd=self.home)
        self.started.append(proc)
        url = f"http://127.0.0.1:{args[2]}"
        wait_for_service(url, proc, timeout_s=30)
        return proc, url

    def refused(self, store: Path, prefix: str) -> subprocess.CompletedProcess[str]:
        """A service that must not start: what it printed, once it ended."""
        return simrun(*self.args(store, prefix), cwd=self.home, timeout=60)

    def stop_all(self) -> None:
        for proc in self.started:
            stop_process(proc)


@pytest.fixture
def services(tmp_path: Path, redis_url: str) -> Iterator[Services]:
    found = Services(tmp_path, redis_url)
    try:
        yield found
    finally:
        found.stop_all()


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused command (exit non-zero, no traceback)."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, output
    return errors[0]


def test_a_second_service_on_the_same_store_is_refused_naming_the_first(
    tmp_path: Path, services: Services
) -> None:
    """A second `simrun service` on the store of a running one (another prefix) exits
    non-zero in one line naming the first's pid and host; `simrun run` on that store is
    refused too, naming the service; `simrun store check` of it says ok and who writes."""
    store = tmp_path / "store"
    first, _ = services.start(store, key_prefix("alone"))
    line = _one_error_line(services.refused(store, key_prefix("alone")))
    assert f"the store {store} is in use by another `simrun service` (pid {first.pid} on " in line
    assert "give this service another --store" in line
    write_work(tmp_path / "quick.yaml", name="quick", units=2)
    ran = simrun("run", "quick.yaml", "--plugins", WORK, "--store", str(store), cwd=tmp_path)
    assert f"is in use by another `simrun service` (pid {first.pid} on " in _one_error_line(ran)
    checked = simrun("store", "check", str(store), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"in use by `simrun service` (pid {first.pid} on " in checked.stdout
    assert first.poll() is None


def test_a_second_service_on_the_same_redis_prefix_is_refused_naming_the_first(
    tmp_path: Path, services: Services
) -> None:
    """A second `simrun service` on another store but the same Redis and key prefix exits
    non-zero in one line naming the first's pid, host and store and the prefix; the
    first goes on."""
    prefix = key_prefix("alone")
    first, url = services.start(tmp_path / "one", prefix)
    line = _one_error_line(services.refused(tmp_path / "two", prefix))
    assert f"another `simrun service` (pid {first.pid} on " in line
    assert f"store {tmp_path / 'one'}" in line
    assert f"drives the Redis key prefix {prefix!r}" in line
    assert "another --prefix" in line
    assert first.poll() is None
    wait_for_service(url, first)


def test_after_a_sigkill_the_next_service_starts_on_the_same_store_and_prefix(
    tmp_path: Path, services: Services, redis_url: str
) -> None:
    """A service killed with SIGKILL leaves its claim in Redis, yet the next service on the
    same store and prefix starts at once (the store's lock went with the process; its claim
    names a process of this host that is gone); a clean stop deletes the claim."""
    store, prefix = tmp_path / "store", key_prefix("alone")
    key = Keys(prefix).service_lock
    client = redis.Redis.from_url(redis_url)
    first, _ = services.start(store, prefix)
    assert json.loads(client.get(key) or b"{}")["pid"] == first.pid
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert client.exists(key)
    second, _ = services.start(store, prefix)
    assert json.loads(client.get(key) or b"{}")["pid"] == second.pid
    stop_process(second)
    assert second.returncode == 0
    assert not client.exists(key)


def test_a_claim_of_another_host_holds_until_it_expires(
    tmp_path: Path, services: Services, redis_url: str
) -> None:
    """A claim left by a service of another host (which this one cannot see is gone) refuses
    the service naming that host until it expires; then the service starts, and its loop
    keeps refreshing its own claim (short with --lock-ttl-s)."""
    prefix = key_prefix("alone")
    key = Keys(prefix).service_lock
    client = redis.Redis.from_url(redis_url)
    holder = {"pid": 4242, "host": "elsewhere", "since": time.time(), "store": "/far", "token": "x"}
    client.set(key, json.dumps(holder), px=120_000)
    line = _one_error_line(services.refused(tmp_path / "store", prefix))
    assert "another `simrun service` (pid 4242 on elsewhere since " in line
    assert "--lock-ttl-s" in line
    client.pexpire(key, 500)  # as if its holder stopped refreshing it a while ago
    wait_until(lambda: not client.exists(key), timeout_s=10, what="the claim to expire")
    proc, _ = services.start(tmp_path / "store", prefix, "--lock-ttl-s", "2")
    assert json.loads(client.get(key) or b"{}")["pid"] == proc.pid
    # Past three of its TTLs, the claim is still there: the loop refreshed it.
    began = time.monotonic()
    wait_until(
        lambda: time.monotonic() - began > 6.5 and client.exists(key),
        timeout_s=15,
        what="the claim to outlive three of its TTLs",
        check=lambda: _alive(client, key),
    )
    assert proc.poll() is None


def _alive(client: redis.Redis, key: str) -> None:
    assert client.exists(key), "the claim expired: the loop did not refresh it"


def test_a_service_started_before_redis_waits_then_claims_its_prefix(tmp_path: Path) -> None:
    """A service started while nothing listens on Redis's port starts and waits as before
    (its API answers); once Redis is there it takes its claim, and a second service on
    that Redis and prefix is refused naming it."""
    server = PrivateRedis(port=free_port())
    services = Services(tmp_path, server.url)
    try:
        first, _ = services.start(tmp_path / "one", "simrun")
        server.start()
        client = redis.Redis.from_url(server.url)
        key = Keys("simrun").service_lock
        wait_until(lambda: client.exists(key), timeout_s=30, what="the service to claim")
        assert json.loads(client.get(key) or b"{}")["pid"] == first.pid
        line = _one_error_line(services.refused(tmp_path / "two", "simrun"))
        assert f"another `simrun service` (pid {first.pid} on " in line
    finally:
        services.stop_all()
        server.stop()


def _in_pid_namespace(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``simrun ARGS`` in a pid namespace of its own (a container's: it is pid 1 there),
    ended with it when killed."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", simrun_exe(), *args]
    return subprocess.Popen(
        argv, cwd=cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_a_service_restarted_in_a_new_pid_namespace_waits_out_its_earlier_claim(
    tmp_path: Path, services: Services, redis_url: str
) -> None:
    """A service SIGKILLed in a container and started again there (the same host and boot,
    a new pid namespace, where its old pid says nothing) is not refused: it watches the
    old claim, takes it once it lapses unrefreshed (within --lock-ttl-s), and serves."""
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], check=False)
    if probe.returncode != 0:
        pytest.skip("this machine does not let a process make a pid namespace (unshare)")
    store, prefix = tmp_path / "store", key_prefix("alone")
    key = Keys(prefix).service_lock
    client = redis.Redis.from_url(redis_url)
    args = services.args(store, prefix, "--lock-ttl-s", "3")
    first = _in_pid_namespace(args, tmp_path)
    try:
        wait_for_service(f"http://127.0.0.1:{args[2]}", first)  # type: ignore[arg-type]
        earlier = json.loads(client.get(key) or b"{}")
        assert earlier["pid"] == 1  # pid 1 of its namespace
    finally:
        first.kill()
        first.wait(timeout=30)
    assert client.exists(key)
    # left as a holder of a longer TTL would leave it: still there when the next one
    # looks, however slowly it starts on a loaded machine
    client.pexpire(key, 15_000)
    args = services.args(store, prefix, "--lock-ttl-s", "3")
    second = _in_pid_namespace(args, tmp_path)
    try:
        wait_for_service(f"http://127.0.0.1:{args[2]}", second, timeout_s=60)  # type: ignore[arg-type]
        now = json.loads(client.get(key) or b"{}")
        assert now["pid"] == 1
        assert now["token"] != earlier["token"]  # its own claim, not the one it waited out
        assert now["pidns"] != earlier["pidns"]
        assert second.poll() is None
    finally:
        second.kill()  # (unshare keeps a SIGTERM to itself; its child dies with it)
        output, _ = second.communicate(timeout=30)
    assert "of this container before a restart: waiting up to" in output
    assert "took over the Redis key prefix" in output
