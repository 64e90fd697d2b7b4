"""Memory-weighted admission: which held jobs may start now. `decide` and `pick` are pure (a
later job may pass one that does not fit yet, until that one has waited ``patience_s``);
`AdmissionGate` is the asyncio shell around them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from simrun.core.sizing import SLACK_GB
from simrun.errors import SimrunError
from simrun.worker.capacity import Capacity


@dataclass(frozen=True)
class Request:
    """What one job needs while it runs: memory in GiB, process slots, GPUs."""

    memory_gb: float
    slots: int = 1
    gpus: int = 0
    what: str = "a job"  # for messages: "a chunk of task 'sweep'"


@dataclass(frozen=True)
class Usage:
    """What the admitted jobs hold together."""

    memory_gb: float = 0.0
    slots: int = 0
    gpus: int = 0

    def plus(self, request: Request, sign: int = 1) -> Usage:
        """What is held once ``request`` is admitted (``sign`` -1: released)."""
        memory_gb = max(0.0, self.memory_gb + sign * request.memory_gb)
        return Usage(memory_gb, self.slots + sign * request.slots, self.gpus + sign * request.gpus)


@dataclass(frozen=True)
class Admission:
    """What `decide` says of one request now, and why (for a wait or a refusal)."""

    verdict: Literal["admit", "wait", "refuse"]
    reason: str = ""


def decide(capacity: Capacity, usage: Usage, request: Request) -> Admission:
    """Whether ``request`` can start now, must wait, or can never run in this container."""
    never = (
        (request.memory_gb > capacity.memory_gb + SLACK_GB,
         f"{request.memory_gb:g} GiB of memory and this worker has "
         f"{capacity.memory_gb:g} GiB in all"),
        (request.slots > capacity.processes,
         f"{request.slots} processes and this worker has {capacity.processes}"),
        (request.gpus > capacity.gpus,
         f"{request.gpus} GPU(s) and this worker has {capacity.gpus}"),
    )  # fmt: skip
    for too_big, needs in never:
        if too_big:
            return Admission("refuse", f"{request.what} needs {needs}")
    short = []
    free_gb = capacity.memory_gb - usage.memory_gb
    if request.memory_gb > free_gb + SLACK_GB:
        short.append(f"{request.memory_gb:g} GiB needed, {max(free_gb, 0.0):g} GiB free")
    if request.slots > capacity.processes - usage.slots:
        short.append("no free process")
    if request.gpus > capacity.gpus - usage.gpus:
        short.append("no free GPU")
    if short:
        return Admission("wait", "; ".join(short))
    return Admission("admit")


@dataclass(frozen=True)
class Waiter:
    request: Request
    waited_s: float


def pick(
    capacity: Capacity, usage: Usage, waiting: Sequence[Waiter], patience_s: float
) -> tuple[list[int], list[int]]:
    """Which waiters to admit now and which to refuse (indices into ``waiting``): in
    order, each that fits is admitted, one that never fits refused, and one that must wait
    lets later ones pass until it has waited ``patience_s``."""
    admit: list[int] = []
    refuse: list[int] = []
    for i, waiter in enumerate(waiting):
        decision = decide(capacity, usage, waiter.request)
        if decision.verdict == "refuse":
            refuse.append(i)
        elif decision.verdict == "admit":
            admit.append(i)
            usage = usage.plus(waiter.request)
        elif waiter.waited_s >= patience_s:
            break
    return admit, refuse


def assign_gpus(all_ids: Sequence[str], in_use: set[str], count: int) -> tuple[str, ...]:
    """The first ``count`` ids of ``all_ids`` not in use."""
    free = [g for g in all_ids if g not in in_use]
    if len(free) < count:
        raise ValueError(f"{count} GPU(s) wanted, {len(free)} free")
    return tuple(free[:count])


class Refused(SimrunError):
    """The container can never run this request; the message says why."""


class AdmissionClosed(SimrunError):
    """The container is stopping and admits nothing more."""


@dataclass
class Grant:
    """An admitted request and the GPU ids it holds; give it back with `AdmissionGate.release`."""

    request: Request
    gpu_ids: tuple[str, ...] = ()
    released: bool = False


@dataclass
class _Entry:
    request: Request
    since: float
    future: asyncio.Future[Grant] = field(repr=False)


class AdmissionGate:
    """Holds jobs until `pick` admits them; `acquire` raises `Refused` for a request that can
    never fit, and `AdmissionClosed` after `close`."""

    def __init__(self, capacity: Capacity, patience_s: float = 5.0) -> None:
        self.capacity = capacity
        self.patience_s = patience_s
        self.usage = Usage()
        self._gpus_in_use: set[str] = set()
        self._waiting: list[_Entry] = []
        self._closed = False

    @property
    def free_memory_gb(self) -> float:
        return max(0.0, self.capacity.memory_gb - self.usage.memory_gb)

    @property
    def free_slots(self) -> int:
        return self.capacity.processes - self.usage.slots

    async def acquire(self, request: Request) -> Grant:
        """Wait until ``request`` is admitted; the grant holds its GPUs."""
        if self._closed:
            raise AdmissionClosed("the worker is stopping")
        decision = decide(self.capacity, self.usage, request)
        if decision.verdict == "refuse":
            raise Refused(decision.reason)
        loop = asyncio.get_running_loop()
        entry = _Entry(request, time.monotonic(), loop.create_future())
        self._waiting.append(entry)
        self._pump()
        try:
            return await entry.future
        except asyncio.CancelledError:
            if entry in self._waiting:
                self._waiting.remove(entry)
            elif entry.future.done() and not entry.future.cancelled():
                self.release(entry.future.result())
            raise

    def release(self, grant: Grant) -> None:
        """Give back what ``grant`` holds and admit whoever fits now."""
        if grant.released:
            return
        grant.released = True
        self.usage = self.usage.plus(grant.request, -1)
        self._gpus_in_use.difference_update(grant.gpu_ids)
        self._pump()

    def close(self) -> None:
        """Admit nothing more; every waiter gets `AdmissionClosed`."""
        self._closed = True
        for entry in self._waiting:
            if not entry.future.done():
                entry.future.set_exception(AdmissionClosed("the worker is stopping"))
        self._waiting.clear()

    def _pump(self) -> None:
        now = time.monotonic()
        waiters = [Waiter(e.request, now - e.since) for e in self._waiting]
        admit, refuse = pick(self.capacity, self.usage, waiters, self.patience_s)
        done = set(admit) | set(refuse)
        for i in admit:
            entry = self._waiting[i]
            gpu_ids = assign_gpus(self.capacity.gpu_ids, self._gpus_in_use, entry.request.gpus)
            self._gpus_in_use.update(gpu_ids)
            self.usage = self.usage.plus(entry.request)
            entry.future.set_result(Grant(entry.request, gpu_ids))
        for i in refuse:
            entry = self._waiting[i]
            reason = decide(self.capacity, Usage(), entry.request).reason
            entry.future.set_exception(Refused(reason))
        self._waiting = [e for i, e in enumerate(self._waiting) if i not in done]
