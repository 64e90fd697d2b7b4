"""Riding out Redis outages: `RedisLink` notices Redis going away, retries with backoff and
then delivers the kept reports, arq's deferred bookkeeping and a heartbeat (again to a Redis
that restarted); `OutageWorker` is arq's `Worker` waiting on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arq.constants import in_progress_key_prefix
from arq.utils import timestamp_ms
from arq.worker import Worker
from redis.exceptions import RedisError, ResponseError, WatchError

from simrun.core.outage import RECONNECT_MAX_S, LinkState, backoff_s
from simrun.core.reports import ReportEntry, RunningJob
from simrun.core.unitlogs import write_atomic
from simrun.queues.connect import cancel_and_wait
from simrun.worker.spool import ReportSpool

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

#: How long (and how many at most) written reports are kept, to be written again should Redis
#: lose its data.
RECENT_S = 60.0
RECENT_MAX = 2000
#: What the worker's I/O with Redis may raise when Redis is away.
LINK_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError)


def status_path(local_dir: Path, worker_id: str) -> Path:
    return local_dir / f"{worker_id}.status.json"


def read_status(path: Path) -> dict[str, Any] | None:
    """A status file's content, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_status(
    path: Path, *, where: str, prefix: str, state: LinkState, kept_reports: int
) -> None:
    """Write the status file of a worker (atomically; a failure is logged)."""
    now = time.time()
    data = {
        "pid": os.getpid(),
        "updated": now,
        "redis": "up" if state.up else "down",
        "where": where,
        "prefix": prefix,
        "down_s": state.down_for(now),
        "reason": state.reason,
        "kept_reports": kept_reports,
    }
    try:
        write_atomic(path, json.dumps(data).encode())
    except OSError as exc:
        log.debug("cannot write the status file %s: %s", path, exc)


async def _disconnect_when_idle(client: Redis) -> None:
    """Drop the connections of ``client`` once the calls holding one ended (within the
    socket timeout): closing one under a call makes redis-py fail with AttributeError."""
    pool = client.connection_pool
    bound = pool.connection_kwargs.get("socket_timeout") or 1.0
    deadline = time.monotonic() + float(bound) + 0.5
    while getattr(pool, "_in_use_connections", None) and time.monotonic() < deadline:  # noqa: ASYNC110 (redis-py offers no event for it)
        await asyncio.sleep(0.02)
    await pool.disconnect()


class RedisLink:
    """Whether Redis answers; `lost` starts the tries again, `wait_up` waits for them."""

    def __init__(
        self,
        redis: Redis,
        where: str,
        spool: ReportSpool,
        write: Callable[[ReportEntry], Awaitable[None]],
        *,
        max_backoff_s: float = RECONNECT_MAX_S,
        status: Path | None = None,
        prefix: str = "",
    ) -> None:
        self.redis, self.where, self.spool, self.write = redis, where, spool, write
        self.prefix = prefix  # the status file says it for the health check
        self.max_backoff_s = max_backoff_s
        self.status = status
        self.state = LinkState()
        self._up = asyncio.Event()
        self._up.set()
        self._finishes: list[Callable[[], Awaitable[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.on_back: Callable[[], Awaitable[None]] | None = None
        self._delivered = 0
        #: One delivery of the kept reports at a time (two would each forget one).
        self._delivering = asyncio.Lock()
        self._recent: deque[tuple[float, ReportEntry]] = deque(maxlen=RECENT_MAX)
        self.server_id: str | None = None
        #: The arq workers' clients: their connections are dropped when Redis is back.
        self.pools: list[Redis] = []

    async def learn_server(self) -> None:
        """Note which Redis server (``run_id``) answers."""
        self.server_id = await self._server()

    async def _server(self) -> str:
        return str((await self.redis.info("server")).get("run_id", ""))

    async def check_server(self) -> None:
        """When another Redis server answers than before (it restarted and may have lost its
        data), write the reports of the last `RECENT_S` again."""
        before = self.server_id
        server = await self._server()
        if before is not None and server != before and self._recent:
            now = time.monotonic()
            recent = [e for t, e in self._recent if now - t <= RECENT_S]
            for entry in recent:
                await self.write(entry)
            log.warning(
                "Redis restarted (it may have lost its data): wrote again the %d reports of "
                "the last %g s", len(recent), RECENT_S,
            )  # fmt: skip
            self._recent.clear()
        self.server_id = server  # once the reports it may have lost are written again

    async def send(self, entry: ReportEntry) -> None:
        """Write a report (raises when Redis does not take it), and remember it a while."""
        await self.write(entry)
        now = time.monotonic()
        self._recent.append((now, entry))
        while self._recent and now - self._recent[0][0] > RECENT_S:
            self._recent.popleft()

    async def report(self, entry: ReportEntry, holding: RunningJob) -> None:
        """Write a report after those kept, or keep it while Redis is away (``holding``: its
        job, as the heartbeat lists it meanwhile)."""
        if self.is_up:
            try:
                if len(self.spool):
                    await self.deliver_kept()
                if not len(self.spool):
                    await self.send(entry)
                    return
            except LINK_ERRORS as exc:
                self.lost(exc)
        if self.spool.add(entry, holding):
            log.debug("job %s: report kept until Redis is back", entry.job_id)

    async def deliver_kept(self) -> int:
        """Write the kept reports, oldest first; how many were written."""
        async with self._delivering:
            return await self.spool.deliver(self.send)

    @property
    def is_up(self) -> bool:
        return self._up.is_set()

    async def wait_up(self, timeout_s: float | None = None) -> bool:
        """Wait until Redis answers again (True), or ``timeout_s`` passed (False)."""
        try:
            await asyncio.wait_for(self._up.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def lost(self, exc: BaseException) -> None:
        """A use of Redis failed with ``exc``: unless already known, Redis is away."""
        if not self.state.lost(time.time(), str(exc) or type(exc).__name__):
            return
        log.warning(
            "lost Redis at %s (%s): keeping the reports of jobs that end, trying again "
            "every %g s at most", self.where, self.state.reason, self.max_backoff_s,
        )  # fmt: skip
        self._up.clear()
        self._delivered = 0
        self._task = asyncio.get_running_loop().create_task(self._reconnect())
        self.write_status()

    def defer(self, finish: Callable[[], Awaitable[None]]) -> None:
        """Run ``finish`` once Redis is back, after the kept reports."""
        self._finishes.append(finish)

    async def _catch_up(self) -> None:
        for client in (self.redis, *self.pools):
            await _disconnect_when_idle(client)
        await self.check_server()
        self._delivered += await self.deliver_kept()
        while self._finishes:
            await self._finishes[0]()
            self._finishes.pop(0)
        if self.on_back is not None:
            await self.on_back()

    async def _reconnect(self) -> None:
        while True:
            pause = backoff_s(self.state.failures, random.random(), max_s=self.max_backoff_s)
            await asyncio.sleep(pause)
            try:
                await self._catch_up()
            except LINK_ERRORS as exc:
                self.state.lost(time.time(), str(exc))
                continue
            away = self.state.back(time.time()) or 0.0
            log.warning("Redis is back after %.1f s, delivered %d reports", away, self._delivered)
            self._up.set()
            self.write_status()
            if len(self.spool):
                # kept while the steps above ran: now, not at the next outage
                try:
                    await self.deliver_kept()
                except LINK_ERRORS as exc:
                    self.lost(exc)
            return

    def write_status(self) -> None:
        """While Redis is away, write the status file; while it answers, remove it."""
        if self.status is None:
            return
        if self.is_up:
            with contextlib.suppress(OSError):
                self.status.unlink(missing_ok=True)
            return
        write_status(
            self.status,
            where=self.where,
            prefix=self.prefix,
            state=self.state,
            kept_reports=len(self.spool),
        )

    async def close(self) -> None:
        """Stop trying; remove the status file."""
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self.status is not None:
            self.status.unlink(missing_ok=True)


class OutageWorker(Worker):
    """arq's `Worker`, but no polls while the link is down, a failed ``start_jobs`` gives its
    semaphore slot back, and a failed ``finish_job`` runs again once Redis is back."""

    def __init__(self, *args: Any, link: RedisLink, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.link = link

    async def _poll_iteration(self) -> None:
        if not self.link.is_up:
            return
        try:
            await super()._poll_iteration()
        except LINK_ERRORS as exc:
            self.link.lost(exc)

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's own, but a Redis error gives back the slot the job had taken."""
        for job_id_b in job_ids:
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                return None
            self.job_counter = self.job_counter + 1
            job_id = job_id_b.decode()
            in_progress_key = in_progress_key_prefix + job_id
            started = False
            try:
                async with self.pool.pipeline(transaction=True) as pipe:
                    await pipe.watch(in_progress_key)
                    ongoing_exists = await pipe.exists(in_progress_key)
                    score = await pipe.zscore(self.queue_name, job_id)
                    if ongoing_exists or not score or score > timestamp_ms():
                        continue  # taken elsewhere, finished, or deferred
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.psetex(in_progress_key, int(self.in_progress_timeout_s * 1000), b"1")
                    try:
                        await pipe.execute()
                    except (ResponseError, WatchError):
                        continue  # taken elsewhere since
                    task = self.loop.create_task(self.run_job(job_id, int(score)))
                    task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
                    self.tasks[job_id] = task
                    started = True
            finally:
                if not started:
                    self.job_counter = self.job_counter - 1
                    self.sem.release()
        return None

    async def finish_job(self, job_id: str, *args: Any, **kwargs: Any) -> None:
        try:
            await super().finish_job(job_id, *args, **kwargs)
        except LINK_ERRORS as exc:
            self.link.lost(exc)
            self.link.defer(lambda: super(OutageWorker, self).finish_job(job_id, *args, **kwargs))

    async def finish_failed_job(self, job_id: str, result_data: bytes | None) -> None:
        try:
            await super().finish_failed_job(job_id, result_data)
        except LINK_ERRORS as exc:
            self.link.lost(exc)
            self.link.defer(
                lambda: super(OutageWorker, self).finish_failed_job(job_id, result_data)
            )
