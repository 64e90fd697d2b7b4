"""The harness of the fault campaign (tests/e2e/test_fault_campaign.py): a real campaign
of its own for each test, faults put into it, and the checks every scenario makes.

A `Campaign` owns, under one directory:

- a `PrivateRedis` of its own (a ``redis-server`` without persistence on a port it keeps,
  so that it can be killed and started again, empty, in its place);
- the service as a child process (tests/support/campaign_service.py: the controller loop
  and the HTTP API), which it can SIGKILL and start again on the same store;
- worker containers as child processes (``python -m simrun.cli worker``), each leading its
  own process group, so that a unit's ``completions.log`` line names the worker that
  computed it (tests/support/campaign_tasks.py);
- read-only readings of the store's SQLite file (``simrun.db``) and the units' outputs.

Waits poll a condition (`tests.support.wait`, no sleep that guesses), and fail at once,
with the tail of its log, when a process the campaign expects to be running has ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from simrun.core.reports import WorkerInfo
from simrun.local.machine import free_port
from simrun.local.redis import PrivateRedis
from simrun.queues.keys import Keys
from simrun.worker.settings import WorkerSettings, worker_argv
from tests.support import REPO
from tests.support.campaign_tasks import COMPLETIONS, MERGED, REFS
from tests.support.keys import TEST_KEY_ENV
from tests.support.redis_server import key_prefix
from tests.support.wait import WaitTimeout, wait_until

#: The task of every campaign workflow.
TASK = "work"
#: Heartbeats of the campaign's workers: a stopped or killed worker is taken for dead
#: within ``HEARTBEAT_TTL_S``; a live one beats eight times per time to live, so a busy
#: machine does not make it look dead.
HEARTBEAT_S = 0.25
HEARTBEAT_TTL_S = 2.0


class CampaignError(AssertionError):
    """A process of the campaign ended when it should not have."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Worker:
    """A worker container of the campaign: its process (the leader of its process group,
    so ``pid`` is the group of its worker processes too) and its log."""

    id: str
    proc: subprocess.Popen[bytes]
    log: Path
    expected_alive: bool = True

    @property
    def pgid(self) -> int:
        return self.proc.pid


@dataclass(frozen=True)
class Unit:
    """A chunk unit as the store keeps it, the fields the campaign reads."""

    idx: int
    kind: str
    state: str
    attempt: int
    worker: str | None
    kills: int
    memory_gb: float | None


@dataclass
class Campaign:
    """One campaign: Redis, the service, workers and the store under ``root``."""

    root: Path
    prefix: str = field(default_factory=lambda: key_prefix("faults"))
    workers: dict[str, Worker] = field(default_factory=dict)
    service: subprocess.Popen[bytes] | None = None
    service_expected: bool = False
    service_starts: int = 0
    address_space_gb: float | None = None

    def __post_init__(self) -> None:
        self.store = self.root / "store"
        self.logs = self.root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # No persistence: killed and started again, it is empty. Its port is chosen now, so
        # processes can be told its URL before it starts.
        self.redis = PrivateRedis(port=free_port())
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=30.0)

    # --- processes -------------------------------------------------------------------

    def start_service(
        self, timeout_s: float = 30.0, *, healthy: bool = True, redis_timeout_s: float | None = None
    ) -> None:
        """Start the service (again, on the same store) and wait until /health says ok (or,
        without ``healthy``, until it answers at all: Redis may not be there yet)."""
        for _ in range(3):
            self.service_starts += 1
            argv = [
                sys.executable, "-m", "tests.support.campaign_service", "--store",
                str(self.store), "--redis-url", self.redis.url, "--prefix", self.prefix,
                "--port", str(self.port),
            ]  # fmt: skip
            if redis_timeout_s is not None:
                argv += ["--redis-timeout-s", str(redis_timeout_s)]
            if self.address_space_gb is not None:
                argv += ["--address-space-gb", str(self.address_space_gb)]
            log = self.logs / "service.log"
            with log.open("ab") as out:
                out.write(f"--- start {self.service_starts}\n".encode())
                out.flush()
                start = out.tell()
                self.service = subprocess.Popen(
                    argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            self.service_expected = True
            answers = self._healthy if healthy else self.health
            try:
                self.wait("the service to answer /health", answers, timeout_s)
                return
            except (CampaignError, WaitTimeout):
                with log.open("rb") as f:
                    f.seek(start)
                    if b"address already in use" not in f.read():
                        raise
            # Another process took the port free_port() chose (tests run in parallel): the
            # service goes on another one.
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.http.close()
            self.http = httpx.Client(base_url=self.url, timeout=30.0)
        raise CampaignError("the service found no free port in 3 tries")

    def health(self) -> dict[str, Any] | None:
        """What /health says (None when the service does not answer)."""
        try:
            answer: dict[str, Any] = self.http.get("/health", timeout=2.0).json()
        except httpx.HTTPError:
            return None
        return answer

    def _healthy(self) -> bool:
        try:
            return bool(self.http.get("/health", timeout=1.0).json().get("ok"))
        except httpx.HTTPError:
            return False

    def health_latency(self, timeout_s: float = 2.0) -> float:
        """Seconds /health took to answer (``timeout_s`` when it did not answer in time)."""
        started = time.monotonic()
        try:
            self.http.get("/health", timeout=timeout_s)
        except httpx.TimeoutException:
            return timeout_s
        return time.monotonic() - started

    def redis_ok(self) -> bool:
        """Whether the service's /health says Redis answers."""
        try:
            answer: dict[str, Any] = self.http.get("/health", timeout=2.0).json()
        except httpx.HTTPError:
            return False
        return answer.get("redis") == "ok"

    def kill_service(self) -> None:
        """SIGKILL the service (the controller and the API) and wait for it to be gone."""
        assert self.service is not None
        self.service_expected = False
        os.killpg(self.service.pid, signal.SIGKILL)
        self.service.wait(timeout=10)

    def start_worker(
        self,
        worker_id: str,
        *,
        processes: int = 2,
        memory_gb: float = 2.0,
        grace_s: float = 5.0,
        **more: Any,
    ) -> Worker:
        """A worker container serving the campaign's type, in a process group of its own
        (``more``: other `WorkerSettings`)."""
        flags = WorkerSettings(
            queues=("cpu",), redis_url=self.redis.url, prefix=self.prefix,
            memory_gb=memory_gb, processes=processes, worker_id=worker_id, grace_s=grace_s,
            plugins=REFS, python_path=(str(REPO),), poll_delay_s=0.01,
            heartbeat_s=HEARTBEAT_S, heartbeat_ttl_s=HEARTBEAT_TTL_S, store=self.store, **more,
        )  # fmt: skip
        log = self.logs / f"worker-{worker_id}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                worker_argv(flags), cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, **TEST_KEY_ENV},
            )  # fmt: skip
        worker = Worker(worker_id, proc, log)
        self.workers[worker_id] = worker
        return worker

    def wait_workers(self, count: int, timeout_s: float = 30.0) -> None:
        """Wait until the service sees ``count`` live workers."""

        def enough() -> bool:
            try:
                return int(self.http.get("/health", timeout=1.0).json()["workers"]) >= count
            except (httpx.HTTPError, KeyError, ValueError):
                return False

        self.wait(f"{count} live workers", enough, timeout_s)

    def signal_worker(self, worker_id: str, sig: signal.Signals) -> float:
        """Send ``sig`` to a worker: SIGKILL, SIGSTOP and SIGCONT to its whole process
        group (a dead or frozen container), others to the container process alone (as
        tini forwards them). Returns the monotonic time it was sent."""
        worker = self.workers[worker_id]
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            worker.expected_alive = False
        if sig == signal.SIGCONT:
            worker.expected_alive = True
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT):
            os.killpg(worker.pgid, sig)
        else:
            worker.expected_alive = False
            worker.proc.send_signal(sig)
        return time.monotonic()

    def check(self) -> None:
        """Raise when a process the campaign expects to be running has ended."""
        for worker in self.workers.values():
            if worker.expected_alive and worker.proc.poll() is not None:
                raise CampaignError(
                    f"worker {worker.id} exited with {worker.proc.returncode}:\n{_tail(worker.log)}"
                )
        if self.service_expected and self.service is not None and self.service.poll() is not None:
            raise CampaignError(
                f"the service exited with {self.service.returncode}:\n"
                f"{_tail(self.logs / 'service.log')}"
            )

    def wait(self, what: str, condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        """The first true value of ``condition``; fails at once when a process ended."""
        return wait_until(condition, timeout_s=timeout_s, what=what, check=self.check)

    def close(self) -> None:
        """Stop everything (SIGCONT first, so that a stopped worker can be terminated)."""
        self.http.close()
        for worker in self.workers.values():
            _stop_group(worker.proc)
        if self.service is not None:
            _stop_group(self.service, timeout_s=2)
        self.redis.stop()

    # --- the API ---------------------------------------------------------------------

    def submit(self, workflow: str) -> str:
        """POST /runs; the run id."""
        response = self.http.post("/runs", json={"workflow": workflow})
        assert response.status_code == 201, response.text
        run_id: str = response.json()["run"]
        return run_id

    # --- the store -------------------------------------------------------------------

    @contextlib.contextmanager
    def db(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection to the store's SQLite file (WAL: never blocks the service)."""
        conn = sqlite3.connect(f"file:{self.store / 'simrun.db'}?mode=ro", uri=True, timeout=10)
        try:
            yield conn
        finally:
            conn.close()

    def run_state(self, run_id: str) -> tuple[str, str]:
        with self.db() as conn:
            row = conn.execute("SELECT state, message FROM runs WHERE id = ?", (run_id,)).fetchone()
        assert row is not None, f"no run {run_id} in the store"
        return str(row[0]), str(row[1])

    def units(self, run_id: str, task: str = TASK) -> list[Unit]:
        """The chunk units of a task, by index, read from the file in one snapshot, each as
        the store keeps it: a row of its own, or in a span (done in a range job), or in a
        range job in flight, or fresh (at or above the task's frontier). A unit kept in two
        of these places comes twice (what `assert_every_unit_once` catches)."""
        with self.db() as conn:
            conn.execute("BEGIN")
            out = [
                Unit(*row)
                for row in conn.execute(
                    "SELECT idx, kind, state, attempt, worker, kills, memory_gb FROM units"
                    " WHERE run_id = ? AND task = ? AND kind = 'chunk'",
                    (run_id, task),
                )
            ]
            for first, last, attempt, worker, gb in conn.execute(
                "SELECT first_idx, last_idx, attempt, worker, memory_gb FROM spans"
                " WHERE run_id = ? AND task = ?",
                (run_id, task),
            ):
                out += [
                    Unit(i, "chunk", "done", attempt, worker, 0, gb) for i in range(first, last + 1)
                ]
            for first, last, attempt, worker, running, gb in conn.execute(
                "SELECT first_idx, last_idx, attempt, worker, running, memory_gb FROM jobs"
                " WHERE run_id = ? AND task = ? AND first_idx IS NOT NULL",
                (run_id, task),
            ):
                state = "running" if running else "queued"
                out += [
                    Unit(i, "chunk", state, attempt, worker, 0, gb) for i in range(first, last + 1)
                ]
            for frontier, units in conn.execute(
                "SELECT frontier, coalesce(units, 0) FROM tasks WHERE run_id = ? AND name = ?",
                (run_id, task),
            ):
                out += [
                    Unit(i, "chunk", "pending", 0, None, 0, None) for i in range(frontier, units)
                ]
            conn.execute("COMMIT")
        return sorted(out, key=lambda u: u.idx)

    def done(self, run_id: str, task: str = TASK) -> set[int]:
        return {u.idx for u in self.units(run_id, task) if u.state == "done"}

    def jobs_in_flight(self, run_id: str) -> list[tuple[str, int, str | None]]:
        """The jobs of a run the store has in flight: (id, attempt, worker)."""
        with self.db() as conn:
            rows = conn.execute(
                "SELECT id, attempt, worker FROM jobs WHERE run_id = ?", (run_id,)
            ).fetchall()
        return [(str(i), int(a), w) for i, a, w in rows]

    def wait_run(self, run_id: str, timeout_s: float = 60.0) -> tuple[str, str]:
        """The run's state and message once it ended."""

        def ended() -> tuple[str, str] | None:
            state, message = self.run_state(run_id)
            return (state, message) if state != "running" else None

        result: tuple[str, str] = self.wait(f"run {run_id} to end", ended, timeout_s)
        return result

    # --- Redis ------------------------------------------------------------------------

    @contextlib.contextmanager
    def redis_client(self) -> Iterator[redis.Redis]:
        client = redis.Redis.from_url(self.redis.url, socket_timeout=5)
        try:
            yield client
        finally:
            client.close()

    def heartbeat(self, worker_id: str) -> WorkerInfo | None:
        """What a worker's live heartbeat says (None once it expired)."""
        with self.redis_client() as client:
            value: bytes | None = client.get(Keys(self.prefix).worker(worker_id))  # type: ignore[assignment]
        return None if value is None else WorkerInfo.from_json(value)

    def unfinished_on(self, worker_id: str, run_id: str, task: str = TASK) -> set[int]:
        """The units of the jobs a worker's heartbeat says it runs that no computation has
        completed yet: what a fault of that worker, now, cuts short."""
        beat = self.heartbeat(worker_id)
        if beat is None:
            return set()
        running = {
            i
            for job in beat.running
            if job.state == "running" and (job.run, job.task) == (run_id, task)
            for i in job.indices
        }
        log = self.out(run_id, task) / COMPLETIONS
        return running - set(self.completions(run_id, task)) if log.exists() else running

    def reports_ingested(self) -> bool:
        """Whether the service has read and acknowledged every report in the stream."""
        with self.redis_client() as client:
            groups: list[dict[str, Any]] = client.xinfo_groups(Keys(self.prefix).reports)  # type: ignore[assignment]
        return bool(groups) and all(g["pending"] == 0 and g["lag"] == 0 for g in groups)

    # --- the outputs -----------------------------------------------------------------

    def out(self, run_id: str, task: str = TASK) -> Path:
        return self.store / "runs" / run_id / task / "out"

    def events(self, run_id: str, task: str = TASK) -> list[tuple[str, int | None, str]]:
        """``completions.log`` in order: ("done", unit, worker id) for each computation
        completed and ("merge", None, worker id) when a merge began."""
        workers = {w.pgid: w.id for w in self.workers.values()}
        found: list[tuple[str, int | None, str]] = []
        log = self.out(run_id, task) / COMPLETIONS
        for line in log.read_text().splitlines():
            what, key, pgid, _pid = line.split()
            worker = workers.get(int(pgid), f"unknown pgid {pgid}")
            if what == "merge":
                assert key == f"{run_id}/{task}", line
                found.append(("merge", None, worker))
                continue
            assert what == "done", line
            run, name, index = key.split("/")
            assert (run, name) == (run_id, task), line
            found.append(("done", int(index), worker))
        return found

    def completions(self, run_id: str, task: str = TASK) -> dict[int, list[str]]:
        """The workers that completed each unit (as often as they did), from
        ``completions.log``."""
        found: dict[int, list[str]] = {}
        for what, index, worker in self.events(run_id, task):
            if what == "done" and index is not None:
                found.setdefault(index, []).append(worker)
        return found

    def redone(self, run_id: str, task: str = TASK) -> int:
        """Computations completed beyond one per unit (work a fault wasted)."""
        done = self.completions(run_id, task)
        return sum(len(by) for by in done.values()) - len(done)

    def assert_every_unit_once(
        self,
        run_id: str,
        units: int,
        *,
        faulted: Iterable[str] = (),
        done_before: Iterable[int] = (),
        lost_reports: bool = False,
        task: str = TASK,
    ) -> None:
        """The checks of every scenario, once the run succeeded:

        - the store has one row per unit, all done, and no (run, task, unit) twice; no job
          of the run stays in flight (in the dispatch window) for long once it ended;
        - every unit's output file is there, with its key, and the merge found each once;
        - the computation the store credits happened (its worker completed the unit), and
          a unit was computed more than once only where a fault made the service dispatch
          it again (attempt > 1), and then at most once by the workers of ``faulted``
          (whose computation, cut short or frozen by the fault, may have completed without
          being reported, or been reported late) and once by the healthy ones, never twice
          by the same worker; a unit done in the store before the fault (``done_before``)
          exactly once. With ``lost_reports`` (Redis lost its data, and with it reports
          not yet read and the attempts of the jobs in flight) a unit dispatched again may
          have been computed twice by healthy workers, the same one included: the worker
          that finished attempt 1 as Redis died can be the one that takes attempt 2, before
          its report of attempt 1, written again after the restart, is read."""
        rows = self.units(run_id, task)
        assert [u.idx for u in rows] == list(range(units)), [u.idx for u in rows]
        assert {u.state for u in rows} == {"done"}, Counter(u.state for u in rows)
        with self.db() as conn:
            twice = conn.execute(
                "SELECT run_id, task, idx, COUNT(*) FROM units GROUP BY run_id, task, idx"
                " HAVING COUNT(*) > 1"
            ).fetchall()
        assert twice == [], f"duplicate unit rows: {twice}"
        self.wait(
            f"the jobs of the ended run {run_id} to leave the window",
            lambda: not self.jobs_in_flight(run_id),
            timeout_s=10,
        )

        out = self.out(run_id, task)
        keys = {i: f"{run_id}/{task}/{i}" for i in range(units)}
        files = {int(p.stem.split("-")[1]): p.read_text() for p in out.glob("unit-*.out")}
        assert files == keys, "unit outputs missing or wrong"
        merged = json.loads((out / MERGED).read_text())
        assert merged == sorted(keys.values()), "the merge did not find every unit once"

        faulty = set(faulted)
        before = set(done_before)
        done = self.completions(run_id, task)
        assert set(done) == set(range(units)), sorted(set(range(units)) - set(done))
        problems = []
        for u in rows:
            by = done[u.idx]
            healthy = [w for w in by if w not in faulty]
            from_faulted = [w for w in by if w in faulty]
            if u.idx in before or u.attempt == 1:
                ok = len(by) == 1
            else:
                ok = len(healthy) <= (2 if lost_reports else 1) and len(from_faulted) <= 1
            ok = ok and u.worker in by and (lost_reports or len(set(by)) == len(by))
            if not ok:
                problems.append(
                    f"unit {u.idx} (attempt {u.attempt}, credited to {u.worker}) completed by {by}"
                )
        assert not problems, "units not computed exactly once:\n" + "\n".join(problems)


def _stop_group(proc: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    """SIGCONT and SIGTERM the process, SIGKILL its group when it does not end in time."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGCONT)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def fault_doc(
    units: int,
    seconds: float = 0.05,
    *,
    hog_mb: int = 0,
    hog_indices: Iterable[int] = (),
    tag: str = "",
    name: str = "campaign",
) -> str:
    """A one-task workflow of ``fault-unit`` (JSON is YAML)."""
    settings: dict[str, Any] = {"units": units, "seconds": seconds, "tag": tag}
    if hog_mb:
        settings |= {"hog_mb": hog_mb, "hog_indices": list(hog_indices)}
    task = {"name": TASK, "type": "fault-unit", "settings": settings}
    return json.dumps({"name": name, "tasks": [task]})


def report(fault: str, recovery_s: float, units: int, **more: float | int) -> str:
    """The campaign's line for a scenario, printed (``pytest -s`` shows it) and returned:
    ``fault=<name> recovery_s=<x> units=<n>`` and any more figures."""
    extra = "".join(
        f" {k}={v:.2f}" if isinstance(v, float) else f" {k}={v}" for k, v in more.items()
    )
    line = f"fault={fault} recovery_s={recovery_s:.2f} units={units}{extra}"
    print(line, flush=True)
    return line
