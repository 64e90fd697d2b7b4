"""Connecting to Redis, for the worker containers and the service alike.

`open_redis` makes a client without touching the network, with bounded socket and connect
times and TCP keepalive (`RedisTimeouts`): a Redis that stops answering without closing
the connection (a partition, a SIGSTOPped server, ``CLIENT PAUSE``) makes a call fail with
a timeout after ``socket_s`` instead of hanging, so the users notice the outage and ride
it out as when the server goes away. No call of simrun blocks in Redis longer than a
second (the service reads its report stream without BLOCK), so the bound is safe;
`JobQueue.read_reports` refuses a BLOCK that would come near it.

`wait_for_redis` is the first contact: Redis that is not reachable yet (refused, timed
out, a name that does not resolve yet: containers often start before Redis or while it
restarts) is waited for with the capped backoff of `simrun.core.outage`, one line when
the wait begins; Redis that will never take simrun's connections (wrong password, no
password, an ACL that forbids, not Redis at all) or a URL that does not parse ends it at
once with `RedisUnusable`, one line. `start_failure` is that decision, pure.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    InvalidResponse,
    RedisError,
    ResponseError,
)

from simrun.config import redact_url
from simrun.core.outage import RECONNECT_MAX_S, REDIS_TIMEOUT_S, LinkState, backoff_s
from simrun.core.wire import deserialize, serialize

if TYPE_CHECKING:
    from arq.connections import ArqRedis

log = logging.getLogger(__name__)

#: Error replies of a server that is there but not ready yet (wait for it).
_NOT_YET = ("LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")

StartFailure = Literal["wait", "fatal"]


class RedisUnusable(Exception):
    """Redis will never take this client (bad URL, credentials, not Redis), or it could
    not be reached within the time given to wait for it. The message is one line."""


@dataclass(frozen=True)
class RedisTimeouts:
    """How long a connection attempt (``connect_s``) and a call (``socket_s``) to Redis
    may take; TCP keepalive probes an idle connection after ``socket_s`` so a peer that
    vanished is found without a call."""

    connect_s: float = REDIS_TIMEOUT_S
    socket_s: float = REDIS_TIMEOUT_S

    def __post_init__(self) -> None:
        if not (self.connect_s > 0 and self.socket_s > 0):
            raise ValueError(f"Redis timeouts must be > 0 s, got {self.connect_s}, {self.socket_s}")

    def keepalive_options(self) -> dict[int, int]:
        """TCP keepalive: first probe after ``socket_s`` idle, then every second, 3 probes
        (where the platform has these options)."""
        idle = max(1, round(self.socket_s))
        wanted = {"TCP_KEEPIDLE": idle, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3}
        return {getattr(socket, k): v for k, v in wanted.items() if hasattr(socket, k)}


def start_failure(exc: BaseException) -> StartFailure:
    """Whether a failed first contact with Redis is worth waiting out ("wait": refused,
    timed out, reset, a name that does not resolve yet, a server still loading) or will
    fail the same way forever ("fatal": bad credentials or none, an ACL, a reply that is
    not Redis's, an error reply, a URL that does not parse)."""
    if isinstance(exc, AuthenticationError | AuthorizationError):
        return "fatal"  # (both are ConnectionErrors to redis-py)
    if isinstance(exc, BusyLoadingError):
        return "wait"
    if isinstance(exc, ResponseError):
        return "wait" if str(exc).startswith(_NOT_YET) else "fatal"
    if isinstance(exc, InvalidResponse):
        return "fatal"  # something else listens there
    if isinstance(exc, RedisError | OSError | TimeoutError):
        return "wait"  # ConnectionError, TimeoutError (redis-py's and asyncio's), DNS
    return "fatal"  # ValueError of a URL that does not parse, and anything unforeseen


def describe(exc: BaseException) -> str:
    """An error as one line for the log."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def open_redis(url: str, timeouts: RedisTimeouts) -> ArqRedis:
    """A client of ``url`` (arq's, with simrun's msgpack serializer) with ``timeouts``; no
    I/O: connections are made by the first calls. `RedisUnusable` when ``url`` does not
    parse."""
    from arq.connections import ArqRedis  # (not for the commands that never use Redis)

    parts = urlsplit(url)
    db = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and db and not db.isdigit():
        # (redis-py would ignore it and use database 0)
        raise RedisUnusable(f"bad Redis URL {redact_url(url)}: database {db!r} is not a number")
    try:
        client: ArqRedis = ArqRedis.from_url(
            url,
            socket_timeout=timeouts.socket_s,
            socket_connect_timeout=timeouts.connect_s,
            socket_keepalive=True,
            socket_keepalive_options=timeouts.keepalive_options(),
        )
    except (ValueError, TypeError) as exc:
        raise RedisUnusable(f"bad Redis URL {redact_url(url)}: {exc}") from None
    client.job_serializer = serialize
    client.job_deserializer = deserialize
    return client


async def wait_for_redis(
    client: ArqRedis,
    where: str,
    *,
    max_wait_s: float | None = None,
    max_backoff_s: float = RECONNECT_MAX_S,
    on_try: Callable[[LinkState], None] | None = None,
) -> float | None:
    """PING ``client`` until Redis answers; how long that took when it did not answer at
    once (None when it did). Logs one line when the wait begins ("waiting for Redis at
    ``where``: <reason>"), none per try; ``on_try`` sees the state after every failed try
    (times of ``time.time()``).
    `RedisUnusable` at once when `start_failure` says waiting is pointless, or once
    ``max_wait_s`` passed (None: wait for ever; 0: one try)."""
    state = LinkState()
    began = time.monotonic()
    while True:
        try:
            await client.ping()
        except (RedisError, OSError, TimeoutError, ValueError) as exc:
            reason = describe(exc)
            if start_failure(exc) == "fatal":
                raise RedisUnusable(f"Redis at {where} cannot be used: {reason}") from None
            left = None if max_wait_s is None else max_wait_s - (time.monotonic() - began)
            if left is not None and left <= 0:
                raise RedisUnusable(
                    f"cannot reach Redis at {where} within {max_wait_s:g} s "
                    f"(--redis-wait-s): {reason}"
                ) from None
            if state.lost(time.time(), reason):
                log.warning("waiting for Redis at %s: %s", where, reason)
            if on_try is not None:
                on_try(state)
            pause = backoff_s(state.failures, random.random(), max_s=max_backoff_s)
            if left is not None:
                pause = min(pause, left)
            await asyncio.sleep(pause)
            continue
        return state.back(time.time())


async def cancel_and_wait(task: asyncio.Future[Any], every_s: float = 0.2) -> None:
    """Cancel ``task`` and wait until it ended, cancelling it again while it runs. With a
    socket timeout, redis-py writes through ``asyncio.wait_for``, which under Python 3.11
    can swallow a cancellation that meets the end of the write: a task cancelled once
    could then go on for ever (a worker that never stops). Its outcome is retrieved, not
    raised."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
    if not task.cancelled():
        task.exception()
