"""``python -m simrun.worker.health``: the container's health check. Healthy when this
container's worker (``--id``, else the newest of this host) beat within ``--max-age-s``, or
its fresh status file says it waits for Redis (an outage must not restart the container)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import click
from redis import Redis
from redis.exceptions import RedisError

from simrun.config import redact_url
from simrun.core.reports import WorkerInfo
from simrun.core.wire import PayloadError
from simrun.queues.keys import Keys
from simrun.worker.link import read_status, status_path
from simrun.worker.settings import DEFAULT_LOCAL_DIR, option

#: A heartbeat older than this is stale.
MAX_AGE_S = 30.0
#: Heartbeats read per round trip while looking for this host's worker.
BATCH = 200


@dataclass(frozen=True)
class Verdict:
    """Healthy or not, and one line that says why."""

    healthy: bool
    message: str


def same_host(a: str, b: str) -> bool:
    """Whether two host names name one host (a full name matches its short form)."""
    a, b = a.strip().lower(), b.strip().lower()
    return bool(a) and (a == b or a.split(".")[0] == b.split(".")[0])


def candidate_ids(ids: Sequence[str], host: str) -> list[str]:
    """The worker ids in the order to read them: those of this host (``<host>-``) first."""
    head = f"{host}-"
    mine = [i for i in ids if i.startswith(head)]
    return mine + [i for i in ids if not i.startswith(head)]


def _describe(info: WorkerInfo, age_s: float) -> str:
    busy = info.processes - info.free_processes
    text = (
        f"worker {info.id} on {info.host}: heartbeat {age_s:.1f} s old, "
        f"queues {','.join(info.queues) or '-'}, {busy}/{info.processes} processes busy"
    )
    return f"{text}, stopping" if info.stopping else text


def judge(
    beats: Iterable[WorkerInfo],
    *,
    host: str,
    worker_id: str | None,
    now: float,
    max_age_s: float = MAX_AGE_S,
) -> Verdict:
    """Whether the heartbeat of this container's worker (``worker_id``, else the newest of
    ``host``) is fresh; a stopping worker that still beats is healthy."""
    if worker_id is not None:
        mine = [b for b in beats if b.id == worker_id]
        whose = f"worker {worker_id!r}"
    else:
        mine = [b for b in beats if same_host(b.host, host)]
        whose = f"a worker on host {host!r}"
    if not mine:
        return Verdict(False, f"no heartbeat of {whose} in Redis")
    newest = max(mine, key=lambda b: b.updated)
    age_s = max(0.0, now - newest.updated)
    if age_s > max_age_s:
        return Verdict(False, f"stale: {_describe(newest, age_s)} (more than {max_age_s:g} s)")
    return Verdict(True, f"ok: {_describe(newest, age_s)}")


def judge_local(
    statuses: Iterable[Mapping[str, Any]],
    *,
    now: float,
    prefix: str,
    max_age_s: float = MAX_AGE_S,
) -> Verdict | None:
    """Healthy when the newest fresh status file of a worker of ``prefix`` says Redis is down;
    None (ask Redis) otherwise."""
    fresh = [
        s for s in statuses
        if isinstance(s.get("updated"), int | float) and now - float(s["updated"]) <= max_age_s
        and s.get("prefix") == prefix
    ]  # fmt: skip
    if not fresh:
        return None
    newest = max(fresh, key=lambda s: float(s["updated"]))
    if newest.get("redis") != "down":
        return None
    down_s = newest.get("down_s")
    away = f" for {float(down_s):.0f} s" if isinstance(down_s, int | float) else ""
    return Verdict(
        True,
        f"waiting for Redis at {newest.get('where', '?')}{away} "
        f"({newest.get('kept_reports', 0)} reports kept): {newest.get('reason', '')}",
    )


def local_statuses(local_dir: Path, worker_id: str | None) -> list[dict[str, Any]]:
    """The status files of worker ``worker_id`` (else of every worker) in ``local_dir``."""
    if worker_id is not None:
        paths = [status_path(local_dir, worker_id)]
    else:
        paths = sorted(local_dir.glob("*.status.json")) if local_dir.is_dir() else []
    return [s for s in (read_status(p) for p in paths) if s is not None]


def _parse(values: Sequence[bytes | None]) -> list[WorkerInfo]:
    out = []
    for value in values:
        if value is None:  # expired between the index and the read
            continue
        try:
            out.append(WorkerInfo.from_json(value))
        except PayloadError:
            continue  # not a heartbeat this version can read: not this container's either
    return out


def check(
    client: Redis,
    keys: Keys,
    *,
    host: str,
    worker_id: str | None,
    now: float,
    max_age_s: float = MAX_AGE_S,
) -> Verdict:
    """`judge` the heartbeats in Redis, reading as few as it takes."""
    if worker_id is not None:
        beats = _parse([cast("bytes | None", client.get(keys.worker(worker_id)))])
        return judge(beats, host=host, worker_id=worker_id, now=now, max_age_s=max_age_s)
    # redis-py types its sync and async answers as one union: these are the sync ones.
    ids = [raw.decode() for raw in cast("list[bytes]", client.zrange(keys.workers, 0, -1))]
    seen: list[WorkerInfo] = []
    verdict = judge(seen, host=host, worker_id=None, now=now, max_age_s=max_age_s)
    ordered = candidate_ids(ids, host)
    for start in range(0, len(ordered), BATCH):
        values = client.mget([keys.worker(i) for i in ordered[start : start + BATCH]])
        seen.extend(
            b for b in _parse(cast("list[bytes | None]", values)) if same_host(b.host, host)
        )
        verdict = judge(seen, host=host, worker_id=None, now=now, max_age_s=max_age_s)
        if verdict.healthy:
            break
    return verdict


@click.command("worker-health")
@option("redis_url")  # the worker's own options: the check reads what the worker writes
@option("prefix")
@click.option("--id", "worker_id", default=None, help="Worker id [default: this host's worker].")
@click.option(
    "--max-age-s", type=click.FloatRange(min=0, min_open=True), default=MAX_AGE_S,
    show_default=True, help="Seconds after which a heartbeat is stale.",
)  # fmt: skip
@click.option(
    "--timeout-s", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
    help="Seconds to wait for Redis.",
)  # fmt: skip
@option("local_dir")
def main(
    redis_url: str,
    prefix: str,
    worker_id: str | None,
    max_age_s: float,
    timeout_s: float,
    local_dir: Path | None,
) -> None:
    """Exit 0 when this container's worker is healthy, 1 otherwise."""
    host = socket.gethostname()
    waiting = judge_local(
        local_statuses(local_dir or DEFAULT_LOCAL_DIR, worker_id),
        now=time.time(),
        prefix=prefix,
        max_age_s=max_age_s,
    )
    if waiting is not None:
        click.echo(waiting.message)
        sys.exit(0)
    try:
        with Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        ) as client:
            verdict = check(
                client, Keys(prefix), host=host, worker_id=worker_id, now=time.time(),
                max_age_s=max_age_s,
            )  # fmt: skip
    except (RedisError, OSError, ValueError) as exc:
        verdict = Verdict(False, f"cannot read heartbeats from {redact_url(redis_url)}: {exc}")
    click.echo(verdict.message)
    sys.exit(0 if verdict.healthy else 1)


if __name__ == "__main__":
    main(prog_name="python -m simrun.worker.health")
