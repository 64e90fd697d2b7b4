"""Connecting to Redis, for the workers and the service alike: `open_redis` with bounded
calls (`RedisTimeouts`), and `wait_for_redis`, which waits with backoff or fails at once."""

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
from simrun.core.signing import JobCodec, JobKey
from simrun.errors import SimrunError

if TYPE_CHECKING:
    from arq.connections import ArqRedis

log = logging.getLogger(__name__)

#: Error replies of a server that is there but not ready yet (wait for it).
_NOT_YET = ("LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")

StartFailure = Literal["wait", "fatal"]


class RedisUnusable(SimrunError):
    """Redis will never take this client (bad URL, credentials, not Redis), or it could
    not be reached within the time given to wait for it. The message is one line."""


@dataclass(frozen=True)
class RedisTimeouts:
    """How long a connection attempt and a call to Redis may take (TCP keepalive probes an
    idle connection after ``socket_s``)."""

    connect_s: float = REDIS_TIMEOUT_S
    socket_s: float = REDIS_TIMEOUT_S

    def __post_init__(self) -> None:
        if not (self.connect_s > 0 and self.socket_s > 0):
            raise ValueError(f"Redis timeouts must be > 0 s, got {self.connect_s}, {self.socket_s}")

    def keepalive_options(self) -> dict[int, int]:
        """TCP keepalive: the first probe after ``socket_s`` idle, then 3, a second apart."""
        idle = max(1, round(self.socket_s))
        wanted = {"TCP_KEEPIDLE": idle, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3}
        return {getattr(socket, k): v for k, v in wanted.items() if hasattr(socket, k)}


def start_failure(exc: BaseException) -> StartFailure:
    """Whether a failed first contact is worth waiting out ("wait") or fails forever
    ("fatal": credentials, ACL, not Redis, bad URL)."""
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


def open_redis(url: str, timeouts: RedisTimeouts, key: JobKey) -> ArqRedis:
    """An arq client of ``url`` with simrun's serializer (msgpack signed with ``key``) and
    ``timeouts``, without I/O; `RedisUnusable` when ``url`` does not parse."""
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
    codec = JobCodec(key)
    client.job_serializer = codec.serialize
    client.job_deserializer = codec.deserialize
    return client


async def wait_for_redis(
    client: ArqRedis,
    where: str,
    *,
    max_wait_s: float | None = None,
    max_backoff_s: float = RECONNECT_MAX_S,
    on_try: Callable[[LinkState], None] | None = None,
) -> float | None:
    """PING ``client`` until Redis answers: how long that took (None: at once);
    `RedisUnusable` when waiting is pointless or ``max_wait_s`` passed."""
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
    """Cancel ``task`` until it ended (Python 3.11's ``wait_for`` in redis-py can swallow a
    cancellation); its outcome is retrieved, not raised."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
    if not task.cancelled():
        task.exception()
