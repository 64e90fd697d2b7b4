"""Reuse of unchanged work across the runs of a store: the fingerprint of a task, which
tasks are forced to run, and which earlier run a task reuses. Pure but for `source_hash`,
`type_version` and `units_present` (they read files and installed distributions).

A task's **fingerprint** is a SHA-256 of the canonical JSON of: its type (name, version of
the distributions its code comes from, command template, image), its validated settings,
and per input port what the input is: ``source:<hash of the source's content>`` or
``task:<the upstream task's fingerprint>:<port>``. The upstream's fingerprint stands for
its output (a Merkle chain): big outputs are never hashed again, and a reused upstream
keeps its fingerprint, so its dependents may be reused too. All the fingerprints of a run
are known at submission (they follow the static graph).

A task is **forced** (it runs whatever the store holds) when the run was submitted with
``--no-reuse``, when it is named by ``--rerun``, or when a task it depends on is forced
(the simplest correct rule: a rerun may write other outputs). Any other task **reuses**
the latest task of an earlier run with the same fingerprint that is done and whose outputs
are still present.

**Per unit** (opt-in, `simrun.plugins.UnitOutputs` on the settings model of a splittable
type): a task that reuses no earlier task whole may still take units one by one. Its
**unit fingerprint** is the fingerprint made without its ``count_settings`` (the settings
that change only how many units there are) and with its declared unit files: two tasks of
one unit fingerprint compute the same files for the same index, since a unit's outputs
depend on the settings and the index only (the spec of ``compute_unit``). Unit ``i`` of a
starting task is reused from a finished task of an earlier run with its unit fingerprint
(done, or failed or cancelled: a unit done there is as good) when unit ``i`` was done there
and every declared file of ``i`` is still in its out directory; of the latest few such
tasks, the one that gives the most units. The other units run, and the merge runs again. A
forced task reuses no unit.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from simrun.core.ranges import Ranges
from simrun.plugins import REFERENCE_FIELDS, TaskType, UnitOutputs, unit_outputs

T = TypeVar("T")

#: Part of every fingerprint: a change of the rule changes every fingerprint (no reuse of
#: work fingerprinted the old way).
FINGERPRINT_VERSION = 1


@dataclass(frozen=True)
class TaskIdentity:
    """What a task's fingerprint is made of, before its inputs are resolved: its type's
    description (`type_identity`), its validated settings, and its inputs (port → the
    workflow's reference, ``source:NAME`` or ``task.port``)."""

    type: Mapping[str, Any]
    settings: Mapping[str, Any]
    inputs: Mapping[str, str]
    #: What its type declares of its units' outputs: it may reuse units one by one.
    units: UnitOutputs | None = None


@dataclass(frozen=True)
class Earlier:
    """A done task of an earlier run with the same fingerprint: its run, when it finished,
    and whether its outputs are still there."""

    run: str
    finished_s: float
    present: bool


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint(identity: TaskIdentity, resolved_inputs: Mapping[str, str]) -> str:
    """The fingerprint of a task (``resolved_inputs``: port → ``source:HASH`` or
    ``task:FINGERPRINT:PORT``)."""
    return _digest(
        {
            "v": FINGERPRINT_VERSION,
            "type": dict(identity.type),
            "settings": dict(identity.settings),
            "inputs": dict(resolved_inputs),
        }
    )


def unit_fingerprint(identity: TaskIdentity, resolved_inputs: Mapping[str, str]) -> str | None:
    """The unit fingerprint of a task (see the module): None when its type declares no
    `UnitOutputs`. The same for two tasks that differ only in ``count_settings``."""
    if identity.units is None:
        return None
    counted = set(identity.units.count_settings)
    return _digest(
        {
            "v": FINGERPRINT_VERSION,
            "unit": list(identity.units.files),
            "type": dict(identity.type),
            "settings": {k: v for k, v in identity.settings.items() if k not in counted},
            "inputs": dict(resolved_inputs),
        }
    )


def _resolved(
    identity: TaskIdentity, source_hashes: Mapping[str, str], found: Mapping[str, str]
) -> dict[str, str]:
    resolved: dict[str, str] = {}
    for port, ref in identity.inputs.items():
        if ref.startswith("source:"):
            resolved[port] = "source:" + source_hashes[ref.removeprefix("source:")]
        else:
            upstream, _, out_port = ref.partition(".")
            resolved[port] = f"task:{found[upstream]}:{out_port}"
    return resolved


def all_fingerprints(
    order: Sequence[str],
    identities: Mapping[str, TaskIdentity],
    source_hashes: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, str]]:
    """The fingerprint of every task of ``order`` (`fingerprints`), and the unit
    fingerprint of each task whose type declares `UnitOutputs`."""
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


def fingerprints(
    order: Sequence[str],
    identities: Mapping[str, TaskIdentity],
    source_hashes: Mapping[str, str],
) -> dict[str, str]:
    """The fingerprint of every task of ``order`` (topological: a task after the tasks it
    reads). ``source_hashes``: source name → `source_hash` of its content. The upstream's
    (whole) fingerprint stands for its output, also in a unit fingerprint."""
    return all_fingerprints(order, identities, source_hashes)[0]


def forced_tasks(
    depends: Mapping[str, Collection[str]], rerun: Collection[str], reuse: bool
) -> set[str]:
    """The tasks that run whatever the store holds: all without ``reuse``, else those of
    ``rerun`` and every task that depends on one of them, directly or not. ``depends``:
    task → the tasks it reads."""
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
    """What is wrong with ``rerun`` for a workflow of ``tasks``: each name that is no task."""
    return [
        f"--rerun {name!r}: no such task (the tasks: {', '.join(tasks)})"
        for name in rerun
        if name not in tasks
    ]


def choose(forced: bool, earlier: Sequence[Earlier]) -> str | None:
    """The run a task reuses: None when it is forced or no earlier task with its
    fingerprint has its outputs present; else the one that finished last."""
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
    """A finished task of an earlier run with the same unit fingerprint: its run and task,
    when it finished, how many units it had, and whether it was done (all its units done;
    else it failed or was cancelled, and only its done units may be taken)."""

    run: str
    task: str
    finished_s: float
    units: int
    done: bool = True


#: Earlier tasks of a unit fingerprint looked at for units, latest first; the one that
#: gives the most wins (an earlier run deleted by hand gives none).
UNIT_SOURCES = 3


def choose_units(forced: bool, earlier: Sequence[UnitsEarlier]) -> list[UnitsEarlier]:
    """The earlier tasks whose units a task may take, latest first, at most
    `UNIT_SOURCES`: none when it is forced; tasks without units are left out. The task
    takes the units of one of them (`best_units`)."""
    if forced:
        return []
    candidates = [e for e in earlier if e.units > 0]
    candidates.sort(key=lambda e: (e.finished_s, e.run, e.task), reverse=True)
    return candidates[:UNIT_SOURCES]


def best_units(options: Sequence[tuple[T, Sequence[range]]]) -> tuple[T, list[range]] | None:
    """Of the earlier tasks (in `choose_units`'s order) and the units each would give
    (`reusable_units`), the one that gives the most (the first of those that give as many);
    None when none gives any."""
    best: tuple[T, list[range]] | None = None
    most = 0
    for earlier, ranges in options:
        count = sum(len(r) for r in ranges)
        if count > most:
            best, most = (earlier, list(ranges)), count
    return best


def merge_ranges(ranges: Iterable[range]) -> list[range]:
    """The union of ``ranges`` (step 1) as sorted, disjoint ranges, adjacent ones joined."""
    return list(Ranges.of(ranges).parts)


def covered(ranges: Sequence[range], size: int) -> list[bool]:
    """For each index below ``size``, whether one of ``ranges`` holds it."""
    flags = [False] * size
    for part in ranges:
        for i in range(max(part.start, 0), min(part.stop, size)):
            flags[i] = True
    return flags


def as_ranges(indices: Collection[int]) -> list[range]:
    """``indices`` as the fewest ranges of consecutive indices, in order."""
    return list(Ranges.of_indices(indices).parts)


def reusable_units(count: int, earlier_units: int, present: Sequence[bool]) -> list[range]:
    """The units of a task of ``count`` units it takes from an earlier task of
    ``earlier_units`` units with its unit fingerprint, as ranges: each index both had that
    was done there and whose files are all still there (``present[i]``, for the indices
    below both counts)."""
    shared = min(count, earlier_units)
    if len(present) < shared:
        raise ValueError(f"reusable_units: {len(present)} presence flags for {shared} units")
    return as_ranges([i for i in range(shared) if present[i]])


def units_present(
    source: Path,
    declared: UnitOutputs,
    count: int,
    earlier_units: int,
    done: Sequence[range] | None = None,
) -> list[range]:
    """The units a task of ``count`` units would take from the out directory ``source`` of
    an earlier task of ``earlier_units`` units (`reusable_units`): those done there
    (``done``; None: all, a done task) whose declared files are all there (blocking I/O:
    the files are looked at, never written)."""
    shared = min(count, earlier_units)
    was_done = covered(done, shared) if done is not None else [True] * shared
    present = [
        was_done[i] and all((source / rel).is_file() for rel in declared.paths(i))
        for i in range(shared)
    ]
    return reusable_units(count, earlier_units, present)


@dataclass(frozen=True)
class UnitStart:
    """How a splittable task starts when it reuses ``reused`` units: its frontier (the
    units at or above it are fresh, pending with no row), the units below it that are
    pending (rows), and how many it reuses."""

    frontier: int
    pending: tuple[range, ...]
    reused: int


def unit_start(count: int, reused: Sequence[range]) -> UnitStart:
    """Where a task of ``count`` units starts when it reuses the units of ``reused``
    (sorted, disjoint ranges below ``count``): its frontier is past the last unit reused,
    and the units below it that are not reused are pending."""
    pending: list[range] = []
    at = 0
    for part in reused:
        if part.step != 1 or part.start < at or part.stop > count or not part:
            raise ValueError(f"unit_start: {reused!r} are not sorted, disjoint ranges of {count}")
        if part.start > at:
            pending.append(range(at, part.start))
        at = part.stop
    return UnitStart(at, tuple(pending), sum(len(r) for r in reused))


def _distribution_versions(modules: Collection[str]) -> list[str]:
    owners = module_owners()
    found = {
        f"{dist}=={version}"
        for module in modules
        for dist in owners.get(module.split(".")[0], ())
        if (version := _version(dist)) is not None
    }
    return sorted(found)


# Read once per process: scanning every installed distribution takes tens of milliseconds,
# too slow for each submission. A package upgraded under a running service is seen after
# its restart, as is its code (the service and its workers run what they loaded).
@functools.cache
def module_owners() -> Mapping[str, list[str]]:
    """The distributions that provide each top-level module (blocking the first time;
    the Editor's palette groups the types by them too)."""
    return importlib.metadata.packages_distributions()


@functools.cache
def _version(dist: str) -> str | None:
    """The installed version of ``dist`` (None: listed but not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def type_version(task_type: TaskType) -> str:
    """The versions of the installed distributions the code of ``task_type`` comes from
    (its settings model and its ``module:function`` references), ``dist==version`` joined
    by commas; ``unknown`` for code outside any distribution (a ``--plugins`` module of the
    working directory: editing it is not seen, give ``--rerun``)."""
    modules = {task_type.settings.__module__}
    for field_name in REFERENCE_FIELDS:
        ref = getattr(task_type, field_name)
        if isinstance(ref, str):
            modules.add(ref.partition(":")[0])
    return ",".join(_distribution_versions(modules)) or "unknown"


def type_identity(task_type: TaskType, version: str) -> dict[str, Any]:
    """The part of a fingerprint that is the type's: its name, ``version`` (`type_version`),
    its command template and image."""
    return {
        "name": task_type.name,
        "version": version,
        "command": task_type.command,
        "image": task_type.image,
    }


def identities(
    tasks: Mapping[str, tuple[TaskType, Mapping[str, Any], Mapping[str, str]]],
) -> dict[str, TaskIdentity]:
    """The identity of each task: name → (its type, its validated settings, its inputs as
    written: port → reference). The service and the dry run both make them here."""
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


def task_fingerprints(
    order: Sequence[str],
    tasks: Mapping[str, tuple[TaskType, Mapping[str, Any], Mapping[str, str]]],
    sources: Mapping[str, Path],
) -> dict[str, str]:
    """The fingerprint of each task of a checked workflow whose types are all installed:
    ``order`` topological, ``tasks`` as `identities` takes them, ``sources``: name → its
    file or directory (hashed here: blocking I/O)."""
    return task_all_fingerprints(order, tasks, sources)[0]


def task_all_fingerprints(
    order: Sequence[str],
    tasks: Mapping[str, tuple[TaskType, Mapping[str, Any], Mapping[str, str]]],
    sources: Mapping[str, Path],
) -> tuple[dict[str, str], dict[str, str]]:
    """`task_fingerprints` and the unit fingerprints (`all_fingerprints`), the sources
    hashed once (blocking I/O)."""
    hashes = {name: source_hash(path) for name, path in sources.items()}
    return all_fingerprints(order, identities(tasks), hashes)


def source_hash(path: Path) -> str:
    """The SHA-256 of a source's content: a file's bytes, or a directory's files (their
    relative paths and bytes, in sorted order; symbolic links by their target)."""
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
