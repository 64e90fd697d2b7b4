"""Reuse of unchanged work across a store's runs: the fingerprints of tasks and units, the
tasks forced to run, and what a task reuses (pure but for hashing and looking at files)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simrun.core.layout import InputRef
from simrun.core.ranges import Ranges
from simrun.plugins import REFERENCE_FIELDS, TaskType, UnitOutputs, unit_outputs

#: Part of every fingerprint: changing the rule changes every fingerprint.
FINGERPRINT_VERSION = 1


@dataclass(frozen=True)
class TaskIdentity:
    """What a task's fingerprint is made of before its inputs are resolved."""

    type: Mapping[str, Any]
    settings: Mapping[str, Any]
    inputs: Mapping[str, str]
    #: What its type declares of its units' outputs: it may reuse units one by one.
    units: UnitOutputs | None = None


@dataclass(frozen=True)
class Earlier:
    """A done task of an earlier run with the same fingerprint."""

    run: str
    finished_s: float
    present: bool


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint(identity: TaskIdentity, resolved_inputs: Mapping[str, str]) -> str:
    """The fingerprint of a task (``resolved_inputs``: port → ``source:HASH`` or
    ``task:FINGERPRINT:PORT``)."""
    return _digest(_identity_data(identity, resolved_inputs, identity.settings))


def unit_fingerprint(identity: TaskIdentity, resolved_inputs: Mapping[str, str]) -> str | None:
    """The fingerprint of a task's units: its declared files and its fingerprint without its
    ``count_settings`` (None without `UnitOutputs`)."""
    if identity.units is None:
        return None
    counted = set(identity.units.count_settings)
    settings = {k: v for k, v in identity.settings.items() if k not in counted}
    return _digest(
        {"unit": list(identity.units.files), **_identity_data(identity, resolved_inputs, settings)}
    )


def _identity_data(
    identity: TaskIdentity, resolved_inputs: Mapping[str, str], settings: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "v": FINGERPRINT_VERSION,
        "type": dict(identity.type),
        "settings": dict(settings),
        "inputs": dict(resolved_inputs),
    }


def _resolved(
    identity: TaskIdentity, source_hashes: Mapping[str, str], found: Mapping[str, str]
) -> dict[str, str]:
    resolved: dict[str, str] = {}
    for port, ref in identity.inputs.items():
        parsed = InputRef.of(ref)
        if parsed.kind == "source":
            resolved[port] = "source:" + source_hashes[parsed.name]
        else:
            resolved[port] = f"task:{found[parsed.name]}:{parsed.port}"
    return resolved


def all_fingerprints(
    order: Sequence[str], identities: Mapping[str, TaskIdentity], source_hashes: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The fingerprint of every task of ``order`` (topological), and the unit fingerprint of
    each that has one."""
    found: dict[str, str] = {}
    units: dict[str, str] = {}
    for name in order:
        identity = identities[name]
        resolved = _resolved(identity, source_hashes, found)
        found[name] = fingerprint(identity, resolved)
        unit_print = unit_fingerprint(identity, resolved)
        if unit_print is not None:
            units[name] = unit_print
    return found, units


def forced_tasks(
    depends: Mapping[str, Collection[str]], rerun: Collection[str], reuse: bool
) -> set[str]:
    """The tasks that run whatever the store holds: all without ``reuse``, else ``rerun`` and
    every task depending on one of them."""
    if not reuse:
        return set(depends)
    forced = set(rerun)
    changed = True
    while changed:
        changed = False
        for name, deps in depends.items():
            if name not in forced and forced.intersection(deps):
                forced.add(name)
                changed = True
    return forced


def rerun_problems(tasks: Sequence[str], rerun: Collection[str]) -> list[str]:
    """A problem for each name of ``rerun`` that is no task."""
    return [
        f"--rerun {name!r}: no such task (the tasks: {', '.join(tasks)})"
        for name in rerun
        if name not in tasks
    ]


def choose(forced: bool, earlier: Sequence[Earlier]) -> str | None:
    """The run a task reuses: the latest earlier one with outputs present (None: forced)."""
    if forced:
        return None
    present = [e for e in earlier if e.present]
    if not present:
        return None
    return max(present, key=lambda e: (e.finished_s, e.run)).run


def reused_text(run: str) -> str:
    """How a reused task is shown: ``reused from RUN``."""
    return f"reused from {run}"


def units_reused_text(count: int, run: str) -> str:
    """How a task that reused some of its units is shown: ``N units reused from RUN``."""
    return f"{count} unit{'' if count == 1 else 's'} reused from {run}"


@dataclass(frozen=True)
class UnitsEarlier:
    """A finished task of an earlier run with the same unit fingerprint (not ``done``: only
    its done units may be taken)."""

    run: str
    task: str
    finished_s: float
    units: int
    done: bool = True


#: Earlier tasks of a unit fingerprint looked at for units, latest first.
UNIT_SOURCES = 3


def choose_units(forced: bool, earlier: Sequence[UnitsEarlier]) -> list[UnitsEarlier]:
    """The earlier tasks a task may take units from, latest first (none when forced)."""
    if forced:
        return []
    candidates = [e for e in earlier if e.units > 0]
    candidates.sort(key=lambda e: (e.finished_s, e.run, e.task), reverse=True)
    return candidates[:UNIT_SOURCES]


def covered(ranges: Sequence[range], size: int) -> list[bool]:
    """For each index below ``size``, whether one of ``ranges`` holds it."""
    flags = [False] * size
    for part in ranges:
        for i in range(max(part.start, 0), min(part.stop, size)):
            flags[i] = True
    return flags


def reusable_units(count: int, earlier_units: int, present: Sequence[bool]) -> list[range]:
    """The units a task of ``count`` units takes from an earlier one: each index both have
    whose files are ``present``, as ranges."""
    shared = min(count, earlier_units)
    if len(present) < shared:
        raise ValueError(f"reusable_units: {len(present)} presence flags for {shared} units")
    return list(Ranges.of_indices(i for i in range(shared) if present[i]).parts)


def units_present(
    source: Path,
    declared: UnitOutputs,
    count: int,
    earlier_units: int,
    done: Sequence[range] | None = None,
) -> list[range]:
    """`reusable_units` from the out directory of an earlier task, of its units ``done``
    (None: all; blocking I/O)."""
    shared = min(count, earlier_units)
    was_done = covered(done, shared) if done is not None else [True] * shared
    present = [
        was_done[i] and all((source / rel).is_file() for rel in declared.paths(i))
        for i in range(shared)
    ]
    return reusable_units(count, earlier_units, present)


@dataclass(frozen=True)
class UnitStart:
    """How a splittable task that reuses units starts: its frontier, the pending units
    below it, and how many it reuses."""

    frontier: int
    pending: tuple[range, ...]
    reused: int


def unit_start(count: int, reused: Sequence[range]) -> UnitStart:
    """Where a task of ``count`` units starts when it reuses ``reused`` (sorted, disjoint
    ranges)."""
    pending: list[range] = []
    at = 0
    for part in reused:
        if part.step != 1 or part.start < at or part.stop > count or not part:
            raise ValueError(f"unit_start: {reused!r} are not sorted, disjoint ranges of {count}")
        if part.start > at:
            pending.append(range(at, part.start))
        at = part.stop
    return UnitStart(at, tuple(pending), sum(len(r) for r in reused))


@dataclass(frozen=True)
class UnitsTaken:
    """The units a task takes: from which earlier task, which, and where it then starts."""

    earlier: UnitsEarlier
    reused: tuple[range, ...]
    start: UnitStart


def take_units(
    count: int, options: Sequence[tuple[UnitsEarlier, Sequence[range]]]
) -> UnitsTaken | None:
    """Reuse per unit, decided alike by the service and the dry run: of the earlier tasks
    and the units each gives (`units_present`), the first giving the most, and the start."""
    best: tuple[UnitsEarlier, tuple[range, ...]] | None = None
    most = 0
    for earlier, ranges in options:
        if (given := sum(len(r) for r in ranges)) > most:
            best, most = (earlier, tuple(ranges)), given
    if best is None:
        return None
    return UnitsTaken(best[0], best[1], unit_start(count, best[1]))


def _distribution_versions(modules: Collection[str]) -> list[str]:
    owners = module_owners()
    found = {
        f"{dist}=={version}"
        for module in modules
        for dist in owners.get(module.split(".")[0], ())
        if (version := _version(dist)) is not None
    }
    return sorted(found)


# Read once per process (tens of ms): an upgrade is seen after a restart, as is its code.
@functools.cache
def module_owners() -> Mapping[str, list[str]]:
    """The distributions that provide each top-level module (blocking the first time)."""
    return importlib.metadata.packages_distributions()


@functools.cache
def _version(dist: str) -> str | None:
    """The installed version of ``dist`` (None: listed but not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def type_version(task_type: TaskType) -> str:
    """``dist==version,...`` of the distributions ``task_type``'s code comes from (``unknown``
    for a module of none)."""
    modules = {task_type.settings.__module__}
    for field_name in REFERENCE_FIELDS:
        ref = getattr(task_type, field_name)
        if isinstance(ref, str):
            modules.add(ref.partition(":")[0])
    return ",".join(_distribution_versions(modules)) or "unknown"


def type_identity(task_type: TaskType, version: str) -> dict[str, Any]:
    """The type's part of a fingerprint."""
    return {
        "name": task_type.name,
        "version": version,
        "command": task_type.command,
        "image": task_type.image,
    }


def identities(
    tasks: Mapping[str, tuple[TaskType, Mapping[str, Any], Mapping[str, str]]],
) -> dict[str, TaskIdentity]:
    """The identity of each task: name → (its type, validated settings, inputs)."""
    versions: dict[str, str] = {}
    found: dict[str, TaskIdentity] = {}
    for name, (task_type, settings, inputs) in tasks.items():
        if task_type.name not in versions:
            versions[task_type.name] = type_version(task_type)
        found[name] = TaskIdentity(
            type_identity(task_type, versions[task_type.name]),
            dict(settings),
            dict(inputs),
            unit_outputs(task_type),
        )
    return found


def task_all_fingerprints(
    order: Sequence[str],
    tasks: Mapping[str, tuple[TaskType, Mapping[str, Any], Mapping[str, str]]],
    sources: Mapping[str, Path],
) -> tuple[dict[str, str], dict[str, str]]:
    """`all_fingerprints` of a checked workflow, its ``sources`` hashed (blocking I/O)."""
    hashes = {name: source_hash(path) for name, path in sources.items()}
    return all_fingerprints(order, identities(tasks), hashes)


def source_hash(path: Path) -> str:
    """The SHA-256 of a source file's bytes, or of a directory's paths and bytes."""
    digest = hashlib.sha256()
    if path.is_dir():
        for item in sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink()):
            rel = item.relative_to(path).as_posix()
            digest.update(f"{len(rel)}:{rel}".encode())
            _feed(digest, item)
    else:
        _feed(digest, path)
    return digest.hexdigest()


def _feed(digest: Any, path: Path) -> None:
    if path.is_symlink() and not path.exists():
        digest.update(b"link:" + str(path.readlink()).encode())
        return
    digest.update(b"file:")
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
