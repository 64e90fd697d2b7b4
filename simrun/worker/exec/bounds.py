"""What holds the processes of one command (`CommandBounds`): a memory cgroup of its own
where the kernel allows it (counted, limited, listed and killed together), else its process
tree with simrun-exec as a child subreaper (a process escaping both is not found).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from simrun.core.sizing import GIB
from simrun.worker.cgroups import (
    Cgroup,
    WorkerCgroups,
    detect,
    kernel_limit_bytes,
    oom_killed,
)
from simrun.worker.proctree import become_subreaper, descendants, kill_pids

#: Rounds of `CommandBounds.kill_all` looking for processes forked while it stops others.
_FREEZE_ROUNDS = 20


class CommandBounds:
    """The cgroup of a command (``box``) or its process tree, for one command run."""

    def __init__(
        self,
        description: str,
        *,
        cgroups: WorkerCgroups | None = None,
        box: Cgroup | None = None,
        before: frozenset[int] = frozenset(),
    ) -> None:
        self.description = description
        self.box = box
        self._cgroups = cgroups
        self._before = before
        self._oom_before = box.oom_kills() if box is not None else None

    @classmethod
    def open(cls, mode: str, limit_gb: float) -> CommandBounds:
        """A cgroup for the command when ``mode`` is "auto" and usable, else its tree."""
        if mode == "off":
            reason = "turned off (cgroups: off)"
        else:
            support = detect()
            reason = support.reason
            if support.usable and support.own is not None:
                cgroups: WorkerCgroups | None = None
                try:
                    cgroups = WorkerCgroups.open(support.own, tag="exec")
                    box = cgroups.new_box()
                    kernel_limit = kernel_limit_bytes(limit_gb)
                    box.set_limit(kernel_limit)
                except OSError as exc:
                    if cgroups is not None:
                        cgroups.close()
                    reason = f"cannot make one under {support.own.path}: {exc}"
                else:
                    limit_text = f"{(kernel_limit or 0) / GIB:.3g} GiB"
                    return cls(
                        f"a memory cgroup v{box.version} of its own ({box.path}, kernel limit "
                        f"{limit_text})",
                        cgroups=cgroups,
                        box=box,
                    )
        if not become_subreaper():
            reason += "; simrun-exec cannot be a subreaper, so orphans escape"
        return cls(
            f"its process tree (no memory cgroup: {reason})",
            before=frozenset(descendants(os.getpid())),
        )

    @property
    def preexec(self) -> Callable[[], None] | None:
        """What the command's first process runs before its program: it joins the cgroup."""
        if self.box is None:
            return None
        procs = str(self.box.path / "cgroup.procs")

        def join() -> None:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

        return join

    def members(self) -> list[int]:
        """The command's processes: its cgroup's, else the descendants new since."""
        if self.box is not None:
            return self.box.procs()
        return [p for p in descendants(os.getpid()) if p not in self._before]

    def signal(self, sig: int) -> None:
        kill_pids(self.members(), sig)

    def kill_all(self, main: int) -> None:
        """SIGKILL every process of the command: the cgroup, else the tree stopped first (so a
        forking one leaves no orphan), reaping the orphans adopted (not ``main``)."""
        if self.box is not None:
            self.box.kill_all()
            return
        stopped: set[int] = set()
        for _ in range(_FREEZE_ROUNDS):
            new = [p for p in self.members() if p not in stopped]
            if not new:
                break
            kill_pids(new, signal.SIGSTOP)
            stopped.update(new)
        kill_pids(stopped, signal.SIGKILL)
        for pid in stopped - {main}:  # the adopted ones are children of simrun-exec now
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def oom_killed(self) -> bool:
        if self.box is None:
            return False
        return oom_killed(self._oom_before, self.box.oom_kills())

    def kernel_peak_gb(self) -> float | None:
        """The most memory the kernel charged to the command's cgroup (page cache included)."""
        peak = self.box.peak_bytes() if self.box is not None else None
        return None if peak is None else peak / GIB

    def close(self) -> None:
        """End what is left in the command's cgroup and remove it (and its area)."""
        if self._cgroups is not None:
            self._cgroups.close()
