"""The Redis side the service uses: the attempts of units, and `JobQueue` over arq
(enqueueing, watching queues and workers, reading reports)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from redis.exceptions import ResponseError

from simrun.config import redact_url
from simrun.core.jobs import JobSpec, queue_for
from simrun.core.reports import ReportEntry, StreamReport, WorkerInfo, now_s
from simrun.core.signing import JobKey
from simrun.core.timing import ENQUEUE_BACKDATE_S
from simrun.core.wire import PayloadError, UnitKey, unit_field
from simrun.queues.connect import RedisTimeouts, open_redis, wait_for_redis
from simrun.queues.keys import DEFAULT_PREFIX, JOB_FUNCTION, Keys

if TYPE_CHECKING:
    from arq.connections import ArqRedis
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

#: Kinds of entries `quarantine` moves aside.
DeadLetterKind = Literal["report", "heartbeat", "job", "attempts"]
#: The most entries the dead-letter stream keeps (the oldest go first), and the most
#: bytes of one entry's raw content kept there.
DEAD_LETTERS_MAX = 10_000
DEAD_LETTER_RAW_BYTES = 4096


def _raw_text(raw: object) -> str:
    """A bounded, printable form of what could not be read."""
    if isinstance(raw, Mapping):
        raw = {_text(k): _text(v) for k, v in raw.items()}
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else repr(raw)
    return text[:DEAD_LETTER_RAW_BYTES]


def _text(value: object) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


async def quarantine(
    redis: Redis, keys: Keys, kind: DeadLetterKind, reason: str, raw: object, source: str
) -> None:
    """Move an entry that cannot be read aside: add it to the dead-letter stream with its
    ``reason`` and ``source`` (a stream entry id, a key, a queue and job id) and count it."""
    fields = {"kind": kind, "reason": reason[:1000], "source": source, "raw": _raw_text(raw)}
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(keys.dead_letters, fields, maxlen=DEAD_LETTERS_MAX, approximate=True)  # type: ignore[arg-type]  # redis-py types fields as a dict of its own unions
        pipe.hincrby(keys.dead_letter_counts, kind, 1)
        await pipe.execute()


async def dead_letter_counts(redis: Redis, keys: Keys) -> dict[str, int]:
    """How many entries of each kind were moved aside since the namespace began."""
    raw = await cast("Awaitable[dict[bytes, bytes]]", redis.hgetall(keys.dead_letter_counts))
    return {_text(k): int(v) for k, v in raw.items() if v.isdigit()}


async def set_current_attempts(
    redis: Redis, keys: Keys, run: str, task: str, attempts: Mapping[UnitKey, int]
) -> None:
    """Record the attempt dispatched last of each unit of a task, when above 1 (a unit with
    none recorded is current for any attempt)."""
    mapping = {unit_field(k): str(v) for k, v in attempts.items() if v > 1}
    if mapping:
        await cast("Awaitable[int]", redis.hset(keys.attempts(run, task), mapping=mapping))


#: Deletes a key and takes a member out of a sorted set, only while the key holds the value
#: read (a worker that beat meanwhile keeps its new heartbeat): 1 when deleted.
_DROP_IF_SAME = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[2])
  return 1
end
return 0
"""
#: Deletes a field of a hash only while it holds the value read: 1 when deleted.
_HDEL_IF_SAME = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""


async def _eval_flag(
    redis: Redis, script: str, keys: Sequence[str], args: Sequence[str | bytes]
) -> bool:
    """Run ``script`` on ``keys`` and ``args``: whether it answered non-zero."""
    # redis-py types the arguments of EVAL as str; it sends bytes as they are.
    argv = cast("list[str]", [*keys, *args])
    return bool(await cast("Awaitable[int]", redis.eval(script, len(keys), *argv)))


def _attempt(value: bytes) -> int | None:
    """An attempts-hash value as the attempt it records, None when it is not an integer."""
    try:
        return int(value)
    except ValueError:
        return None


async def current_attempts(
    redis: Redis, keys: Keys, run: str, task: str, units: Sequence[UnitKey]
) -> dict[UnitKey, int]:
    """The current attempt of those ``units`` that have one recorded; a value that is not an
    integer is quarantined (kind ``attempts``) and its unit has none recorded."""
    if not units:
        return {}
    name = keys.attempts(run, task)
    fields = [unit_field(u) for u in units]
    values = await cast("Awaitable[list[bytes | None]]", redis.hmget(name, fields))
    found: dict[UnitKey, int] = {}
    for unit, unit_name, value in zip(units, fields, values, strict=True):
        if value is None:
            continue
        attempt = _attempt(value)
        if attempt is not None:
            found[unit] = attempt
            continue
        if await _eval_flag(redis, _HDEL_IF_SAME, [name], [unit_name, value]):
            reason = f"the attempt of unit {unit_name} is not an integer"
            await quarantine(redis, keys, "attempts", reason, value, source=f"{name} {unit_name}")
            log.warning(
                "%s: %s (%r): moved to %s; the unit counts as current for any attempt",
                name,
                reason,
                _raw_text(value)[:80],
                keys.dead_letters,
            )
    return found


async def forget_attempts(redis: Redis, keys: Keys, run: str, tasks: Iterable[str]) -> int:
    """Delete the attempts hashes of these tasks of a run (once no job of them can run):
    how many existed."""
    names = sorted({keys.attempts(run, task) for task in tasks})
    if not names:
        return 0
    return int(await redis.delete(*names))


async def attempts_by_run(redis: Redis, keys: Keys) -> dict[str, set[str]]:
    """The tasks with an attempts hash in Redis, by run (a SCAN: not for every step)."""
    found: dict[str, set[str]] = {}
    async for raw in redis.scan_iter(match=keys.attempts_pattern, count=1000):
        try:
            run, task = keys.split_attempts(raw.decode() if isinstance(raw, bytes) else raw)
        except PayloadError:
            continue  # another namespace's key the pattern matched: not ours to touch
        found.setdefault(run, set()).add(task)
    return found


def scored_at(now: float) -> datetime:
    """The score arq gives a job enqueued at ``now`` (unix s): `ENQUEUE_BACKDATE_S` before."""
    return datetime.fromtimestamp(now - ENQUEUE_BACKDATE_S, tz=UTC)


class JobQueue:
    """Enqueueing jobs, watching queues and workers, and reading reports, over an arq pool."""

    def __init__(
        self, pool: ArqRedis, keys: Keys, key: JobKey, timeouts: RedisTimeouts | None = None
    ) -> None:
        self.pool = pool
        self.keys = keys
        #: What signs the jobs enqueued and checks the reports read.
        self.key = key
        #: The bounds of the pool's calls (a BLOCK must end well within ``socket_s``).
        self.timeouts = timeouts or RedisTimeouts()
        #: The consumer groups of the report stream this queue created (or found).
        self._groups: set[str] = set()

    @classmethod
    async def connect(
        cls,
        redis_url: str,
        prefix: str = DEFAULT_PREFIX,
        timeouts: RedisTimeouts | None = None,
        *,
        key: JobKey,
        wait: bool = True,
    ) -> JobQueue:
        """A queue over a new pool to ``redis_url`` signing with ``key``; with ``wait``, once
        Redis answered (`wait_for_redis`), else without I/O."""
        timeouts = timeouts or RedisTimeouts()
        pool = open_redis(redis_url, timeouts, key)
        if wait:
            try:
                await wait_for_redis(pool, redact_url(redis_url))
            except BaseException:
                await pool.aclose()
                raise
        return cls(pool, Keys(prefix), key, timeouts)

    @property
    def block_max_s(self) -> float:
        """The longest BLOCK a read may ask: half the socket timeout."""
        return self.timeouts.socket_s / 2

    @property
    def redis(self) -> Redis:
        return cast("Redis", self.pool)

    async def close(self) -> None:
        await self.pool.aclose()

    async def server_id(self) -> str:
        """The ``run_id`` of the Redis server: it changes when the server restarts."""
        info = await self.pool.info("server")
        return str(info.get("run_id", ""))

    async def enqueue(self, spec: JobSpec) -> bool:
        """Put a job on its queue; False when arq has a job of that id (or its result).

        arq scores a job by the enqueuer's clock and a worker takes it once the score is at
        most its own: the score is set `ENQUEUE_BACKDATE_S` in the past, so a worker whose
        clock is behind takes it at once (every job moved alike: the order stays)."""
        from arq.constants import expires_extra_ms

        job = await self.pool.enqueue_job(
            JOB_FUNCTION,
            spec.to_dict(),
            _job_id=self.keys.arq_job_id(spec.job_id),
            _queue_name=self.keys.queue(queue_for(spec)),
            _defer_until=scored_at(now_s()),
            _expires=expires_extra_ms / 1000,  # arq's default, not shortened by the score
        )
        return job is not None

    async def enqueue_many(self, specs: Iterable[JobSpec], concurrency: int = 32) -> list[bool]:
        """`enqueue` for many jobs with at most ``concurrency`` in flight; results in order."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        gate = asyncio.Semaphore(concurrency)

        async def one(spec: JobSpec) -> bool:
            async with gate:
                return await self.enqueue(spec)

        return list(await asyncio.gather(*(one(s) for s in specs)))

    async def queued_job_ids(self, queue: str) -> list[str]:
        """Ids of the jobs in a logical queue (cpu, gpu, image:…), waiting or running."""
        raw = await self.pool.zrange(self.keys.queue(queue), 0, -1)
        return [self.keys.job_id_from_arq(r.decode()) for r in raw]

    async def drop_jobs(self, queue: str, job_ids: Sequence[str]) -> int:
        """Take jobs out of a queue, with arq's keys for them: how many were queued."""
        from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix

        if not job_ids:
            return 0
        arq_ids = [self.keys.arq_job_id(j) for j in job_ids]
        async with self.pool.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.queue(queue), *arq_ids)
            for prefix in (job_key_prefix, in_progress_key_prefix, retry_key_prefix):
                pipe.delete(*(prefix + a for a in arq_ids))
            removed, *_ = await pipe.execute()
        return int(removed)

    async def held_in_progress(self, job_ids: Iterable[str]) -> set[str]:
        """Those of ``job_ids`` that arq holds in progress (a worker took them)."""
        from arq.constants import in_progress_key_prefix

        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return set()
        async with self.pool.pipeline(transaction=False) as pipe:
            for job in ids:
                pipe.exists(in_progress_key_prefix + self.keys.arq_job_id(job))
            found = await pipe.execute()
        return {job for job, n in zip(ids, found, strict=True) if n}

    async def live_workers(self) -> list[WorkerInfo]:
        """The worker containers whose heartbeat has not expired; a heartbeat that cannot be
        read is quarantined (`drop_heartbeat`) and its worker is not live."""
        raw_ids = await self.pool.zrange(self.keys.workers, 0, -1)
        if not raw_ids:
            return []
        ids: list[str] = []
        for raw in raw_ids:
            try:
                ids.append(raw.decode())
            except UnicodeDecodeError:
                await self._drop_bad_id(raw)
        values = await self.pool.mget([self.keys.worker(i) for i in ids]) if ids else []
        gone = [i for i, v in zip(ids, values, strict=True) if v is None]
        if gone:
            await self.pool.zrem(self.keys.workers, *gone)
        live: list[WorkerInfo] = []
        for worker_id, value in zip(ids, values, strict=True):
            if value is None:
                continue
            try:
                live.append(WorkerInfo.from_json(value))
            except PayloadError as exc:
                await self.drop_heartbeat(worker_id, value, str(exc))
        return live

    async def drop_heartbeat(self, worker_id: str, raw: bytes, reason: str) -> bool:
        """Quarantine the heartbeat ``raw`` of ``worker_id`` (kind ``heartbeat``): its key
        deleted and its id out of the workers' index, unless the worker beat again since;
        logged once. Whether it was dropped here."""
        key = self.keys.worker(worker_id)
        if not await _eval_flag(
            self.redis, _DROP_IF_SAME, [key, self.keys.workers], [raw, worker_id]
        ):
            return False  # beat again, or dropped by another reader
        await quarantine(self.redis, self.keys, "heartbeat", reason, raw, source=key)
        log.warning(
            "worker %s: its heartbeat cannot be read (%s): moved to %s, the worker is not live "
            "until it beats again",
            worker_id,
            reason,
            self.keys.dead_letters,
        )
        return True

    async def _drop_bad_id(self, raw: bytes) -> None:
        """A member of the workers' index that is not UTF-8: out, with its key, quarantined."""
        key = self.keys.worker("").encode() + raw
        async with self.pool.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.workers, raw)
            pipe.get(key)
            pipe.delete(key)
            removed, value, _ = await pipe.execute()
        if removed:
            reason = "the worker id in the index of workers is not UTF-8"
            shown = _text(key)
            await quarantine(self.redis, self.keys, "heartbeat", reason, value or raw, shown)
            log.warning("%s (%s): moved to %s", reason, shown, self.keys.dead_letters)

    async def _ensure_group(self, group: str) -> None:
        """Create ``group`` on the report stream (and the stream) unless it exists."""
        try:
            await self.pool.xgroup_create(self.keys.reports, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(group)

    async def read_reports(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = 1000,
        pending: bool = False,
    ) -> list[StreamReport]:
        """Up to ``count`` new entries for ``consumer`` of ``group`` (``pending``: those read
        and not acknowledged); the group is made when missing."""
        if block_ms is not None and not pending and block_ms / 1000 > self.block_max_s:
            raise ValueError(
                f"block_ms={block_ms}: a BLOCK of more than {self.block_max_s:g} s would be "
                f"taken for a Redis that stopped answering (socket timeout "
                f"{self.timeouts.socket_s:g} s)"
            )
        if group not in self._groups:
            await self._ensure_group(group)
        try:
            answer = await self._read(group, consumer, count, block_ms, pending)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard(group)
            await self._ensure_group(group)
            answer = await self._read(group, consumer, count, block_ms, pending)
        out: list[StreamReport] = []
        for _stream, entries in answer or []:
            for raw_id, fields in entries:
                entry_id = raw_id.decode()
                try:
                    out.append(StreamReport(entry_id, ReportEntry.from_fields(fields, self.key)))
                except PayloadError as exc:
                    out.append(StreamReport(entry_id, None, str(exc), fields))
        return out

    async def wait_report(self, after_id: str | None, timeout_s: float) -> bool:
        """Whether an entry after ``after_id`` (None: after those there now) comes within
        ``timeout_s``, read for no group; one call of at most `block_max_s`."""
        block_ms = max(1, round(min(timeout_s, self.block_max_s) * 1000))
        answer = await self.pool.xread(
            {self.keys.reports: after_id or "$"}, count=1, block=block_ms
        )
        return bool(answer)

    async def _read(
        self, group: str, consumer: str, count: int, block_ms: int | None, pending: bool
    ) -> Any:
        return await self.pool.xreadgroup(
            group,
            consumer,
            {self.keys.reports: "0" if pending else ">"},
            count=count,
            block=None if pending else block_ms,
        )

    async def ack(self, group: str, ids: Sequence[str]) -> None:
        """Acknowledge entries of ``group`` and delete them from the stream."""
        if ids:
            async with self.pool.pipeline(transaction=True) as pipe:
                pipe.xack(self.keys.reports, group, *ids)
                pipe.xdel(self.keys.reports, *ids)
                await pipe.execute()
