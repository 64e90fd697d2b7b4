"""A process and its descendants, read from /proc (the one reader of ``/proc/<pid>/stat`` and
``status``): who they are, their anonymous memory, and ending them all. Every read tolerates
a process exiting at any moment."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterable, Iterator

_RSS_ANON = b"RssAnon:"

#: Whether this kernel lists a thread's children in ``/proc/<pid>/task/<tid>/children``.
CHILDREN_FILES = os.path.exists("/proc/thread-self/children")


def _read(path: str) -> bytes | None:
    """The content of a /proc file, or None when its process is gone (``os.read``: the
    sampler reads thousands, and ``open()`` costs more than the read)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    try:
        return os.read(fd, 8192)
    except ProcessLookupError:  # the process exited between open and read (ESRCH)
        return None
    finally:
        os.close(fd)


def own_anon_bytes(pid: int) -> int | None:
    """``RssAnon`` of one process in bytes; None when it is gone or already a zombie."""
    data = _read(f"/proc/{pid}/status")
    if data is None:
        return None
    start = data.find(_RSS_ANON)
    if start < 0:  # a zombie (or a kernel thread) has no memory of its own any more
        return None
    end = data.find(b"\n", start)
    fields = data[start + len(_RSS_ANON) : end if end >= 0 else len(data)].split()
    return int(fields[0]) * 1024


def _children_from_task_files(pid: int) -> list[int]:
    """Direct children of ``pid`` from its threads' ``children`` files; [] once it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return []
    found: list[int] = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children")
        if data is not None:
            found.extend(int(x) for x in data.split())
    return found


def stat(pid: int | str, maxsplit: int = -1) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name; None once it is gone."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return data[data.rfind(b")") + 2 :].split(maxsplit=maxsplit)


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, None once it is gone."""
    fields = stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _all_stats() -> Iterator[tuple[int, list[bytes]]]:
    """Every process's pid and its first `stat` fields: one scan of ``/proc``."""
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat(name, maxsplit=3)) is not None:
            yield int(name), fields


def _parent_map() -> dict[int, list[int]]:
    """Every process's children, from the ppid field of ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for pid, fields in _all_stats():
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(pid)
    return children


def descendants(pid: int, children_files: bool = CHILDREN_FILES) -> list[int]:
    """All living descendants of ``pid`` (an orphan adopted by init is no longer one): from
    the threads' ``children`` files where the kernel has them, else from one scan of /proc."""
    tree = None if children_files else _parent_map()

    def children(of: int) -> list[int]:
        return _children_from_task_files(of) if tree is None else tree.get(of, [])

    out: list[int] = []
    stack, seen = children(pid), {pid}
    while stack:
        child = stack.pop()
        if child in seen:  # a pid reused while we walk cannot make us loop
            continue
        seen.add(child)
        out.append(child)
        stack.extend(children(child))
    return out


def anon_memory_bytes(pid: int, include_children: bool = False) -> int | None:
    """Anonymous resident memory of ``pid`` in bytes, with its descendants' when
    ``include_children``; None once ``pid`` is gone."""
    own = own_anon_bytes(pid)
    if own is None:
        return None
    if not include_children:
        return own
    return own + sum(own_anon_bytes(child) or 0 for child in descendants(pid))


def anon_bytes_of(pids: Iterable[int]) -> int:
    """The anonymous resident memory of these processes together."""
    return sum(own_anon_bytes(pid) or 0 for pid in pids)


def _state(pid: int) -> bytes | None:
    """The state letter of a process (b"R", b"S", b"Z"...), None once gone."""
    fields = stat(pid, maxsplit=1)
    return fields[0] if fields else None


def living(pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` that exist and are not zombies."""
    return [pid for pid in pids if _state(pid) not in (None, b"Z")]


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that are not zombies."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:  # the group is empty: the common case needs no scan
        return []
    except PermissionError:  # someone else's group: nothing of ours is in it
        return []
    return [
        pid
        for pid, fields in _all_stats()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z"
    ]


def kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to each of ``pids``; one gone already (or not ours) is skipped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_tree(pid: int, sig: int, *, group: bool = False) -> None:
    """Send ``sig`` to ``pid`` (its process group with ``group``) and its descendants."""
    tree = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    kill_pids(tree, sig)


#: Rounds of `kill_tree` looking for descendants forked while it stops the others.
_FREEZE_ROUNDS = 20


def kill_tree(pid: int, *, include_root: bool = True) -> list[int]:
    """SIGKILL the descendants of ``pid`` (and ``pid``, with ``include_root``); the pids
    signalled. The tree is stopped first, so that a process forking cannot leave an orphan."""
    stopped: set[int] = set()
    for _ in range(_FREEZE_ROUNDS):
        new = [p for p in descendants(pid) if p not in stopped]
        if not new:
            break
        kill_pids(new, signal.SIGSTOP)
        stopped.update(new)
    victims = [pid, *stopped] if include_root else list(stopped)
    kill_pids(victims, signal.SIGKILL)
    return victims


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process a child subreaper (orphans stay in its tree); False if refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
