"""The rules of the first contact with Redis (`simrun.queues.connect`): which failures are
worth waiting out, and the bounds every client gets."""

from __future__ import annotations

import builtins
import socket

import pytest
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    BusyLoadingError,
    ConnectionError,
    InvalidResponse,
    NoPermissionError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
)

from simrun.queues.client import JobQueue
from simrun.queues.connect import (
    RedisTimeouts,
    RedisUnusable,
    describe,
    open_redis,
    start_failure,
)
from simrun.queues.keys import Keys
from tests.support.keys import TEST_KEY

REFUSED = "Error 111 connecting to 127.0.0.1:6399. Connect call failed ('127.0.0.1', 6399)."
DNS_AGAIN = "Error -3 connecting to redis:6379. Temporary failure in name resolution."
DNS_UNKNOWN = "Error -2 connecting to redis:6379. Name or service not known."

WAIT_OUT = [
    ConnectionError(REFUSED),
    ConnectionError(DNS_AGAIN),
    ConnectionError(DNS_UNKNOWN),  # a compose service whose container is not created yet
    ConnectionError("Connection closed by server."),
    TimeoutError("Timeout reading from 127.0.0.1:6379"),
    builtins.TimeoutError(),
    ConnectionRefusedError(111, "Connection refused"),
    ConnectionResetError(104, "Connection reset by peer"),
    OSError(113, "No route to host"),
    socket.gaierror(-3, "Temporary failure in name resolution"),
    BusyLoadingError("Redis is loading the dataset in memory"),
    ResponseError("MASTERDOWN Link with MASTER is down"),
    ResponseError("TRYAGAIN Multiple keys request during rehashing of slot"),
]
NEVER_WORKS = [
    AuthenticationError("invalid username-password pair or user is disabled."),
    AuthenticationError("Authentication required."),
    AuthenticationWrongNumberOfArgsError("wrong number of arguments for 'auth' command"),
    AuthorizationError("NOAUTH Authentication required."),
    NoPermissionError("NOPERM this user has no permissions to run the 'ping' command"),
    ResponseError("WRONGPASS invalid username-password pair or user is disabled."),
    ResponseError("AUTH <password> called without any password configured for the default user."),
    ResponseError("ERR DB index is out of range"),
    ReadOnlyError("You can't write against a read only replica."),
    InvalidResponse("Protocol Error: H, HTTP/1.1 400 Bad Request"),
    ValueError(
        "Redis URL must specify one of the following schemes (redis://, rediss://, unix://)"
    ),
    ValueError("Port could not be cast to integer value as 'x'"),
    RuntimeError("something nobody foresaw"),
]


@pytest.mark.parametrize("exc", WAIT_OUT, ids=lambda e: f"{type(e).__name__}:{str(e)[:30]}")
def test_a_redis_not_reachable_yet_is_waited_for(exc: BaseException) -> None:
    """Refused, timed out, reset, unroutable, a name that does not resolve (yet), a server
    still loading or without its master: Redis may come, so the start waits for it."""
    assert start_failure(exc) == "wait"


@pytest.mark.parametrize("exc", NEVER_WORKS, ids=lambda e: f"{type(e).__name__}:{str(e)[:30]}")
def test_a_redis_that_will_never_take_the_client_fails_at_once(exc: BaseException) -> None:
    """Wrong or missing credentials, an ACL that forbids, an error reply, something that is
    not Redis, a URL that does not parse (or an error nobody foresaw): waiting would not
    help, the start fails at once."""
    assert start_failure(exc) == "fatal"


def test_an_error_is_described_in_one_line() -> None:
    """The reason logged and shown is one line with the error's type."""
    assert describe(ConnectionError("a\n  b")) == "ConnectionError: a b"
    assert describe(builtins.TimeoutError()) == "TimeoutError"


def test_timeouts_must_be_positive_and_set_keepalive() -> None:
    """A Redis call and a connection attempt are bounded by a positive time; idle
    connections are probed by TCP keepalive from that time on."""
    with pytest.raises(ValueError, match="must be > 0"):
        RedisTimeouts(socket_s=0)
    options = RedisTimeouts(socket_s=2.6).keepalive_options()
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert options[socket.TCP_KEEPIDLE] == 3
        assert options[socket.TCP_KEEPCNT] == 3


def test_a_client_has_the_bounds_it_was_given() -> None:
    """`open_redis` makes no connection and gives each connection the socket and connect
    timeouts and keepalive."""
    client = open_redis(
        "redis://127.0.0.1:1/0", RedisTimeouts(connect_s=2.0, socket_s=3.0), TEST_KEY
    )
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (3.0, 2.0)
    assert kwargs["socket_keepalive"] is True


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379/0", "redis://127.0.0.1:port/0", "redis://h:6379/not-a-db"]
)
def test_a_bad_url_is_refused_in_one_line(url: str) -> None:
    """A URL that does not parse is `RedisUnusable` at once, naming the URL."""
    with pytest.raises(RedisUnusable, match="bad Redis URL"):
        open_redis(url, RedisTimeouts(), TEST_KEY)


async def test_a_blocking_read_must_end_well_within_the_socket_timeout() -> None:
    """A BLOCK longer than half the socket timeout would be taken for a frozen Redis: the
    read is refused before any I/O."""
    timeouts = RedisTimeouts(socket_s=1.0)
    queue = JobQueue(
        open_redis("redis://127.0.0.1:1/0", timeouts, TEST_KEY), Keys("t"), TEST_KEY, timeouts
    )
    try:
        with pytest.raises(ValueError, match=r"BLOCK of more than 0\.5 s"):
            await queue.read_reports("g", "c", block_ms=1000)
    finally:
        await queue.close()
