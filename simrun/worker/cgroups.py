"""Memory cgroups (v2 delegated, or v1's memory controller) for the worker processes, one
each: a limit, the OOM kill counter, and killing a box's processes together. A worker's boxes
live in an area named after its pid and start time, swept once it is dead. Parsing is pure."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from simrun.core.sizing import GIB
from simrun.worker.proctree import kill_pids, living, start_time

log = logging.getLogger(__name__)

#: The kernel's limit of a cgroup over the sampler's: the sampler stops a unit that grows,
#: the kernel (which counts everything charged) what the sampler cannot see, a little above.
KERNEL_LIMIT_FACTOR = 1.25


def kernel_limit_bytes(kill_at_gb: float | None) -> int | None:
    """The kernel memory limit (bytes) of a process the sampler kills at ``kill_at_gb``."""
    if kill_at_gb is None:
        return None
    return int(kill_at_gb * KERNEL_LIMIT_FACTOR * GIB)


#: Prefix of the directory of one worker's cgroups.
AREA_PREFIX = "simrun-w"
#: A v1 limit this high means "no limit" (the kernel writes PAGE_COUNTER_MAX in bytes).
_NO_LIMIT_FLOOR = 2**62


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """The cgroup path of each controller of a ``/proc/<pid>/cgroup`` text (v2 under "")."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(","):  # v2's "" too
            found[controller] = path
    return found


@dataclass(frozen=True)
class Mount:
    """A cgroup mount: its point, the hierarchy's path it shows, type and super options."""

    point: str
    root: str
    fstype: str
    options: tuple[str, ...]


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts of a ``/proc/<pid>/mountinfo`` text."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        mounts.append(Mount(point, root, tail[0], tuple(tail[2].split(","))))
    return mounts


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) decoded."""
    if "\\" not in field:
        return field
    return field.encode().decode("unicode_escape")


def cgroup_dir(mount: Mount, path: str) -> Path | None:
    """The directory of cgroup ``path`` on ``mount``; None when the mount does not show it."""
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    relative = path[len(root) :].lstrip("/")
    return Path(mount.point, relative) if relative else Path(mount.point)


def parse_oom_kills(text: str) -> int | None:
    """The ``oom_kill`` counter of a ``memory.events`` (v2) or ``memory.oom_control`` (v1)
    text; None without one (v1 before Linux 4.13)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill":
            return int(parts[1]) if parts[1].isdigit() else None
    return None


def parse_limit(text: str, name: str = "memory.max") -> int | None:
    """The bytes of a ``memory.max`` or ``memory.limit_in_bytes`` text (``name``); None for no
    limit."""
    value = text.strip()
    if value == "max":
        return None
    if not value.lstrip("-").isdigit():
        raise ValueError(f"{name} holds {value!r}, not a number or 'max'")
    number = int(value)
    return None if number < 0 or number >= _NO_LIMIT_FLOOR else number


def limit_text(version: int, limit_bytes: int | None) -> str:
    """What the limit file of a cgroup of ``version`` takes for ``limit_bytes``."""
    if limit_bytes is None:
        return "max" if version == 2 else "-1"
    return str(limit_bytes)


def oom_killed(before: int | None, after: int | None) -> bool:
    """Whether an OOM kill counter went up."""
    return before is not None and after is not None and after > before


def owner_of(name: str) -> tuple[int, int] | None:
    """The pid and start time an area is named after (``simrun-w<pid>-<start>[-<tag>]``)."""
    if not name.startswith(AREA_PREFIX):
        return None
    parts = name[len(AREA_PREFIX) :].split("-")
    if len(parts) == 3 and parts[2].isalnum():
        parts = parts[:2]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class Cgroup:
    """One memory cgroup directory, of cgroup ``version`` 1 or 2."""

    path: Path
    version: int

    @property
    def limit_file(self) -> Path:
        return self.path / ("memory.max" if self.version == 2 else "memory.limit_in_bytes")

    @property
    def _events_file(self) -> Path:
        return self.path / ("memory.events" if self.version == 2 else "memory.oom_control")

    def procs(self) -> list[int]:
        """The processes in the cgroup ([] once it is gone)."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return []
        return [int(x) for x in text.split()]

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def set_limit(self, limit_bytes: int | None) -> None:
        """Set the memory limit (None: none); `OSError` when the kernel refuses it."""
        self.limit_file.write_text(limit_text(self.version, limit_bytes))

    def peak_bytes(self) -> int | None:
        """The most memory charged to the cgroup so far, page cache included; None when not
        known (v2 before Linux 5.19, or the cgroup is gone)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def oom_kills(self) -> int | None:
        """How many processes of the cgroup the OOM killer ended (None: not known)."""
        try:
            text = self._events_file.read_text()
        except OSError:
            return None
        return parse_oom_kills(text)

    def kill_all(self, *, spare: int | None = None, timeout_s: float = 10.0) -> list[int]:
        """SIGKILL the cgroup's processes but ``spare`` until none is left; those still alive."""
        deadline = time.monotonic() + timeout_s
        while True:
            victims = [p for p in living(self.procs()) if p != spare]
            if not victims:
                return []
            if spare is None and self.version == 2 and (self.path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (self.path / "cgroup.kill").write_text("1")
            kill_pids(victims, signal.SIGKILL)
            if time.monotonic() >= deadline:
                return living(victims)
            time.sleep(0.002)

    def remove(self, timeout_s: float = 10.0) -> bool:
        """End the processes left in the cgroup and remove it; False (logged) on failure."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.kill_all(timeout_s=max(0.0, deadline - time.monotonic()))
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.warning("cannot remove the cgroup %s: %s", self.path, exc)
                    return False
            time.sleep(0.01)


@dataclass(frozen=True)
class CgroupSupport:
    """The cgroup this process is in, and whether worker processes can have their own under
    it (``reason``: why not)."""

    own: Cgroup | None
    usable: bool
    reason: str

    def describe(self) -> str:
        """One phrase for the worker's start-up line."""
        if self.usable and self.own is not None:
            return f"a memory cgroup v{self.own.version} per worker process under {self.own.path}"
        return f"the process tree (no memory cgroups: {self.reason})"


def _own_cgroup(proc_cgroup: str, mountinfo: str) -> tuple[Cgroup | None, str]:
    """The memory cgroup this process is in, v2 first, with why there is none."""
    paths = parse_proc_cgroup(proc_cgroup)
    mounts = parse_mountinfo(mountinfo)
    reasons: list[str] = []
    if "" in paths:
        for mount in (m for m in mounts if m.fstype == "cgroup2"):
            where = cgroup_dir(mount, paths[""])
            if where is None:
                continue
            controllers = (where / "cgroup.controllers").read_text().split()
            if "memory" in controllers:
                return Cgroup(where, 2), ""
            reasons.append(f"the cgroup2 hierarchy at {mount.point} has no memory controller")
    if "memory" in paths:
        for mount in (m for m in mounts if m.fstype == "cgroup" and "memory" in m.options):
            where = cgroup_dir(mount, paths["memory"])
            if where is not None and where.is_dir():
                return Cgroup(where, 1), ""
    if not reasons:
        reasons.append("no cgroup memory controller is mounted")
    return None, "; ".join(reasons)


def _enable_memory(group: Cgroup) -> None:
    """Let the children of a v2 cgroup have the memory controller."""
    control = group.path / "cgroup.subtree_control"
    if "memory" not in control.read_text().split():
        control.write_text("+memory")


def _probe(own: Cgroup) -> str | None:
    """Make a child cgroup with a limit under ``own`` and remove it; why not, or None."""
    probe = Cgroup(
        own.path / f"{AREA_PREFIX}probe-{os.getpid()}-{uuid.uuid4().hex[:6]}", own.version
    )
    try:
        if own.version == 2:
            _enable_memory(own)
        probe.path.mkdir()
    except OSError as exc:
        return f"cannot make a cgroup under {own.path}: {exc.strerror or exc}"
    try:
        probe.set_limit(64 * 2**20)
        probe.set_limit(None)
    except OSError as exc:
        return f"cannot set a memory limit under {own.path}: {exc.strerror or exc}"
    finally:
        with contextlib.suppress(OSError):
            probe.path.rmdir()
    return None


def detect(
    proc_cgroup: str | None = None, mountinfo: str | None = None, *, probe: bool = True
) -> CgroupSupport:
    """Whether worker processes can have memory cgroups of their own here (the /proc texts
    given or read, and a probe cgroup made)."""
    try:
        own, reason = _own_cgroup(
            proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text(),
            mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text(),
        )
    except OSError as exc:
        return CgroupSupport(None, False, f"cannot read the cgroups of this process: {exc}")
    if own is None:
        return CgroupSupport(None, False, reason)
    problem = _probe(own) if probe else None
    if problem is not None:
        return CgroupSupport(own, False, problem)
    return CgroupSupport(own, True, "")


def sweep(own: Cgroup) -> int:
    """Remove the cgroup areas under ``own`` of workers gone (SIGKILLed); how many."""
    removed = 0
    try:
        names = [p.name for p in own.path.iterdir() if p.is_dir()]
    except OSError as exc:
        log.warning("cannot look for cgroups left behind in %s: %s", own.path, exc)
        return 0
    for name in names:
        owner = owner_of(name)
        if owner is None or start_time(owner[0]) == owner[1]:
            continue
        area = own.path / name
        children = [p for p in area.iterdir() if p.is_dir()] if area.is_dir() else []
        if all(Cgroup(child, own.version).remove(timeout_s=2.0) for child in children):
            with contextlib.suppress(OSError):
                area.rmdir()
                removed += 1
    return removed


class WorkerCgroups:
    """The cgroups of one worker container: an area under its cgroup, a box per process."""

    def __init__(self, own: Cgroup, area: Cgroup) -> None:
        self.own = own
        self.area = area
        self.version = own.version
        self._next = 0

    @classmethod
    def open(cls, own: Cgroup, tag: str = "") -> WorkerCgroups:
        """Sweep what dead workers left under ``own`` and make this worker's area (``tag``: of
        another owner in this process); `OSError` when it cannot."""
        swept = sweep(own)
        if swept:
            log.info("removed %d cgroup areas left by workers that are gone", swept)
        pid = os.getpid()
        name = f"{AREA_PREFIX}{pid}-{start_time(pid)}" + (f"-{tag}" if tag else "")
        area = Cgroup(own.path / name, own.version)
        area.path.mkdir(exist_ok=True)
        if own.version == 2:
            _enable_memory(area)
        return cls(own, area)

    def new_box(self) -> Cgroup:
        """A new, empty cgroup for one worker process (no limit yet)."""
        self._next += 1
        box = Cgroup(self.area.path / f"p{self._next}", self.version)
        box.path.mkdir()
        return box

    def close(self) -> None:
        """Remove every box left (ending its processes) and the area."""
        if not self.area.path.exists():
            return
        for child in [p for p in self.area.path.iterdir() if p.is_dir()]:
            Cgroup(child, self.version).remove()
        self.area.remove()
