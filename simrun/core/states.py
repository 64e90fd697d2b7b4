"""The state machines of runs, tasks and units, as pure functions. A unit goes ``pending``
→ ``queued`` → ``running`` → ``done`` | ``failed`` (or back to ``pending`` to be retried); a
task has chunk units (0…n-1) or one ``command`` unit, and maybe a ``merge`` unit."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal, get_args

RunState = Literal["running", "succeeded", "failed", "cancelled"]
TaskState = Literal[
    "waiting", "ready", "running", "merging", "done", "failed", "blocked", "cancelled"
]
UnitState = Literal["pending", "queued", "running", "done", "failed"]
UnitKind = Literal["chunk", "merge", "command"]

RUN_STATES: tuple[str, ...] = get_args(RunState)
TASK_STATES: tuple[str, ...] = get_args(TaskState)
UNIT_STATES: tuple[str, ...] = get_args(UnitState)
UNIT_KINDS: tuple[str, ...] = get_args(UnitKind)

#: Runs that have ended: they dispatch nothing more (a replay makes a failed run run again).
ENDED_RUN_STATES: frozenset[RunState] = frozenset({"succeeded", "failed", "cancelled"})
#: Tasks that have not started: set by the controller, no units yet.
NOT_STARTED_TASK_STATES: frozenset[TaskState] = frozenset({"waiting", "ready"})
#: Started tasks whose units (or merge) may still be unfinished.
ACTIVE_TASK_STATES: frozenset[TaskState] = frozenset({"running", "merging", "blocked"})
#: Tasks that have finished: none of their units runs again unless a replay asks.
FINISHED_TASK_STATES: frozenset[TaskState] = frozenset({"done", "failed", "cancelled"})
#: Units that are in a job on Redis or on a worker.
ACTIVE_UNIT_STATES: frozenset[UnitState] = frozenset({"queued", "running"})
#: Units not yet done or failed: waiting to be dispatched, or active.
UNFINISHED_UNIT_STATES: frozenset[UnitState] = frozenset({"pending", "queued", "running"})
#: Units that have ended.
FINISHED_UNIT_STATES: frozenset[UnitState] = frozenset({"done", "failed"})
#: The index of the merge unit of a task, and of the command unit of an unsplit task.
MERGE_INDEX = -1
COMMAND_INDEX = 0

#: How a run `running` in the store is shown while its `simrun run` is gone (or held).
INTERRUPTED: Literal["interrupted"] = "interrupted"
ShownRunState = RunState | Literal["interrupted"]


def shown_run_state(state: RunState, held: bool) -> ShownRunState:
    """A run's state as shown: `INTERRUPTED` when it is running and ``held`` (left alone)."""
    return INTERRUPTED if held and state == "running" else state


class TaskPhase(StrEnum):
    """How a started task's chunk units go out: as usual, or a probe of a few first while
    the rest waits for their reports (`simrun.core.sizing.probe_units`)."""

    USUAL = ""
    PROBING = "probing"


#: Task states in which the task still makes progress by itself.
_PROGRESSING: frozenset[TaskState] = frozenset({"ready", *ACTIVE_TASK_STATES})
#: Task states that only the controller sets (units never change them).
_SET_BY_CONTROLLER: frozenset[TaskState] = NOT_STARTED_TASK_STATES | {"done", "cancelled"}
#: Finished task states that keep every task downstream from running.
_BLOCKING: frozenset[TaskState] = FINISHED_TASK_STATES - {"done"}


def unit_key(kind: str, index: int) -> int | str:
    """A unit's key on the wire: a chunk's index, else ``"merge"`` or ``"command"``."""
    return index if kind == "chunk" else kind


def unit_index(key: int | str) -> int:
    """The stored index of a unit key (the inverse of `unit_key`); ValueError for others."""
    if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        return key
    if key == "merge":
        return MERGE_INDEX
    if key == "command":
        return COMMAND_INDEX
    raise ValueError(f"unit key {key!r} is neither an index >= 0 nor 'merge' or 'command'")


@dataclass(frozen=True)
class Limits:
    """How often a unit may fail before it is ``failed`` for good: ``max_retries`` errors
    (and timeouts) after the first, ``max_kills`` kills for memory."""

    max_retries: int = 2
    max_kills: int = 4

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.max_kills < 0:
            raise ValueError(f"limits must be >= 0, got {self}")


#: What ``retry_on`` may name besides exception types: kills for memory, timeouts, any error.
RETRY_KINDS = ("memory", "timeout", "error")
#: Each further retry of a task's unit waits this many times longer than the one before.
RETRY_BACKOFF = 2.0
#: The longest a retry waits, whatever its delay and backoff say.
MAX_RETRY_DELAY_S = 3600.0


@dataclass(frozen=True)
class RetryRule:
    """A task's own retry rule (None: the service's `Limits`): ``retries``, ``retry_on``
    (`RETRY_KINDS` and exception names; None: all) and the first retry's delay."""

    retries: int | None = None
    retry_on: tuple[str, ...] | None = None
    retry_delay_s: float = 0.0

    @classmethod
    def of(cls, data: Mapping[str, object] | None) -> RetryRule:
        """The rule stored as JSON (``retries``, ``retry_on``, ``retry_delay_s``)."""
        data = data or {}
        retries, on, delay = data.get("retries"), data.get("retry_on"), data.get("retry_delay_s")
        return cls(
            retries=int(retries) if isinstance(retries, int) else None,
            retry_on=tuple(str(x) for x in on) if isinstance(on, list | tuple) else None,
            retry_delay_s=float(delay) if isinstance(delay, int | float) else 0.0,
        )

    def retries_on(self, kind: str, exceptions: Sequence[str] = ()) -> bool:
        """Whether an outcome of ``kind`` (one of `RETRY_KINDS`; an error with the
        ``exceptions`` it raised, `exception_matches`) is retried at all."""
        if self.retry_on is None:
            return True
        if kind in self.retry_on:
            return True
        return kind == "error" and exception_matches(self.retry_on, exceptions)

    def delay_s(self, errors: int) -> float:
        """The wait before the retry that follows a unit's ``errors``-th error (>= 1)."""
        if self.retry_delay_s <= 0:
            return 0.0
        return min(MAX_RETRY_DELAY_S, self.retry_delay_s * RETRY_BACKOFF ** max(0, errors - 1))


def exception_names(error: type[BaseException]) -> tuple[str, ...]:
    """The qualified names of ``error``'s type and its bases, its own first, no ``object``."""
    return tuple(f"{t.__module__}.{t.__qualname__}" for t in error.__mro__ if t is not object)


def exception_matches(retry_on: Sequence[str], exceptions: Sequence[str]) -> bool:
    """Whether ``retry_on`` names one of ``exceptions``: equal to a qualified name or to its
    last dotted part (``OSError`` matches ``builtins.OSError``)."""
    wanted = set(retry_on)
    return any(name in wanted or name.rsplit(".", 1)[-1] in wanted for name in exceptions)


def exception_type(error: str | None) -> str | None:
    """The type (without its module) of the exception a traceback ends with, the last line
    reading ``module.Type: message``; None when the message does not end that way."""
    if not error:
        return None
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return None
    head = lines[-1].split(":", 1)[0].strip()
    name = head.rsplit(".", 1)[-1]
    if head and all(part.isidentifier() for part in head.split(".")) and name[:1].isupper():
        return name
    return None


def _named(name: str | None) -> tuple[str, ...]:
    return (name,) if name is not None else ()


@dataclass(frozen=True)
class UnitRow:
    """One unit as stored; ``job_id`` and ``memory_gb`` are of its current attempt; a
    pending unit waits until ``not_before_s`` (its retry's delay)."""

    run: str
    task: str
    index: int
    kind: UnitKind
    state: UnitState
    attempt: int = 0
    job_id: str | None = None
    memory_gb: float | None = None
    worker: str | None = None
    error: str | None = None
    errors: int = 0
    kills: int = 0
    queued_s: float | None = None
    started_s: float | None = None
    finished_s: float | None = None
    not_before_s: float | None = None

    @property
    def key(self) -> int | str:
        """The unit's key on the wire (see `unit_key`)."""
        return unit_key(self.kind, self.index)


def unit_after_outcome(
    unit: UnitRow,
    outcome: str,
    attempt: int,
    *,
    error: str | None,
    worker: str,
    limit_gb: float,
    limits: Limits,
    now_s: float,
    started_s: float | None = None,
    rule: RetryRule | None = None,
    exceptions: Sequence[str] = (),
) -> UnitRow | None:
    """The unit after a worker reported ``outcome`` at ``attempt``; None to ignore it.
    ``done`` counts from any attempt unless another is in flight, the rest only for the
    current one; kills and errors go back to pending unless past the limits or the task's
    ``rule``; ``not_run`` and ``refused`` go back without counting."""
    if unit.state == "done":
        return None
    start = unit.started_s if unit.started_s is not None else started_s
    in_flight = unit.state in ACTIVE_UNIT_STATES
    if outcome == "done" and not (in_flight and attempt != unit.attempt):
        return replace(
            unit, state="done", worker=worker, error=None, started_s=start, finished_s=now_s
        )
    if outcome in ("done", "stale") or attempt != unit.attempt or not in_flight:
        return None
    back = replace(
        unit, state="pending", worker=worker, started_s=start, finished_s=now_s, not_before_s=None
    )
    rule = rule or RetryRule()
    if outcome == "killed":
        return _after_kill(back, limit_gb, limits, rule)
    if outcome in ("failed", "timeout"):
        raised = tuple(exceptions) if exceptions else _named(exception_type(error))
        return _after_error(back, outcome == "timeout", error, limits, rule, raised, now_s)
    if outcome == "not_run":
        return back
    if outcome == "refused":
        return replace(back, error=error or "refused by the worker")
    raise ValueError(f"unknown outcome {outcome!r} for unit {unit.key} of {unit.task!r}")


def _after_kill(back: UnitRow, limit_gb: float, limits: Limits, rule: RetryRule) -> UnitRow:
    kills = back.kills + 1
    message = f"killed for memory at its limit of {limit_gb:g} GiB per process"
    if not rule.retries_on("memory"):
        message = f"{message}; not retried: the task's retry_on does not name 'memory'"
    elif kills > limits.max_kills:
        message = f"{message}; killed {kills} times, more than the {limits.max_kills} allowed"
    else:
        return replace(back, kills=kills, error=message)
    return replace(back, state="failed", kills=kills, error=message)


def _after_error(
    back: UnitRow,
    timeout: bool,
    error: str | None,
    limits: Limits,
    rule: RetryRule,
    raised: tuple[str, ...],
    now_s: float,
) -> UnitRow:
    errors = back.errors + 1
    text = error or ("timed out" if timeout else "failed without a message")
    allowed = limits.max_retries if rule.retries is None else rule.retries
    if errors > allowed or not rule.retries_on("timeout" if timeout else "error", raised):
        return replace(back, state="failed", errors=errors, error=text)
    delay = rule.delay_s(errors)
    return replace(back, errors=errors, error=text, not_before_s=now_s + delay if delay else None)


@dataclass(frozen=True)
class TaskCounts:
    """The chunk or command units of a task by state, and its merge unit's (None: none)."""

    pending: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    merge: UnitState | None = None

    @property
    def total(self) -> int:
        return self.pending + self.queued + self.running + self.done + self.failed

    @property
    def unfinished(self) -> int:
        return self.pending + self.queued + self.running

    @classmethod
    def of(cls, by_state: Mapping[str, int], merge: str | None = None) -> TaskCounts:
        unknown = set(by_state) - set(UNIT_STATES)
        if unknown:
            raise ValueError(f"unknown unit states {sorted(unknown)}")
        if merge is not None and merge not in UNIT_STATES:
            raise ValueError(f"unknown merge state {merge!r}")
        return cls(**{s: int(n) for s, n in by_state.items()}, merge=merge)  # type: ignore[arg-type]  # keys checked above


def next_task_state(
    current: TaskState, counts: TaskCounts, has_merge: bool
) -> tuple[TaskState, bool]:
    """The state of a started task given its units, and whether to make its merge unit
    now; a ``blocked`` task stays so while units wait (the dispatcher lifts it)."""
    if current in _SET_BY_CONTROLLER:
        return current, False
    if counts.failed and not counts.unfinished:
        return "failed", False
    if current == "blocked" and (counts.pending or counts.merge == "pending"):
        return "blocked", False
    if counts.done == counts.total:
        if not has_merge or counts.merge == "done":
            return "done", False
        if counts.merge == "failed":
            return "failed", False
        return "merging", counts.merge is None
    return "running", False


def _blocked_by_failure(
    task: str, states: Mapping[str, str], deps: Mapping[str, Collection[str]]
) -> bool:
    """Whether a failed or cancelled task is upstream of ``task`` (it can never run)."""
    seen: set[str] = set()
    stack = list(deps.get(task, ()))
    while stack:
        up = stack.pop()
        if up in seen:
            continue
        seen.add(up)
        if states.get(up) in _BLOCKING:
            return True
        stack.extend(deps.get(up, ()))
    return False


def run_state(
    states: Mapping[str, str], deps: Mapping[str, Collection[str]], cancelled: bool = False
) -> RunState:
    """The state of a run from its tasks' states and its graph (task → tasks it reads):
    ``running`` while some task progresses or a waiting one still can."""
    unknown = {s for s in states.values() if s not in TASK_STATES}
    if unknown:
        raise ValueError(f"unknown task states {sorted(unknown)}")
    if cancelled:
        return "cancelled"
    if all(s == "done" for s in states.values()):
        return "succeeded"
    for task, state in states.items():
        if state in _PROGRESSING:
            return "running"
        if state == "waiting" and not _blocked_by_failure(task, states, deps):
            return "running"
    return "failed"
