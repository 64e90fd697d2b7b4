"""The volumes the service writes to: whether its SQLite file lies on a network file
system, where its locks may not hold (read from ``/proc/mounts``), and a write that finds
its volume full (`NoSpace`, `is_no_space`, `space_line`, `low_space`)."""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from simrun.errors import SimrunError

#: File system types (as ``/proc/mounts`` names them) on which SQLite's locking is not safe.
NETWORK_FS_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs",
        "fuse.glusterfs", "fuse.sshfs", "fuse.cephfs", "fuse.s3fs", "fuse.gcsfuse",
        "fuse.rclone", "fuse.juicefs", "lustre", "gpfs", "beegfs", "ocfs2", "gfs2",
        "fuse.lizardfs", "fuse.moosefs", "davfs", "fuse.davfs2",
    }
)  # fmt: skip


def _unescape(field: str) -> str:
    """A field of ``/proc/mounts`` with its octal escapes (``\\040`` for a space) undone."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mounts(text: str) -> list[tuple[str, str]]:
    """(mount point, file system type) of each line of ``/proc/mounts``'s text."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            found.append((_unescape(parts[1]), parts[2]))
    return found


def mount_type(path: PurePosixPath, mounts: list[tuple[str, str]]) -> str | None:
    """The type of the file system of the absolute ``path`` (its longest mount point)."""
    best: tuple[int, str] | None = None
    for point, fstype in mounts:
        mp = PurePosixPath(point)
        if mp == path or mp in path.parents:
            depth = len(mp.parts)
            if best is None or depth >= best[0]:
                best = (depth, fstype)
    return None if best is None else best[1]


def network_fs_type(path: PurePosixPath, mounts: list[tuple[str, str]]) -> str | None:
    """The network file system type ``path`` lies on, None when it is local (or unknown)."""
    fstype = mount_type(path, mounts)
    if fstype is None:
        return None
    if fstype in NETWORK_FS_TYPES or fstype.startswith(("nfs", "fuse.ceph")):
        return fstype
    return None


def _existing(path: Path) -> Path:
    """``path`` resolved, through its nearest ancestor that exists (the rest as given):
    where a file not made yet will be."""
    path = path.absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.resolve() / path.relative_to(candidate)
    return path


def _nearest(path: Path) -> Path:
    """The nearest directory of `_existing` ``path`` that exists (what statvfs can ask)."""
    found = _existing(path)
    return next((p for p in (found, *found.parents) if p.exists()), found)


def db_volume_problem(db: Path, mounts_file: Path = Path("/proc/mounts")) -> str | None:
    """One line when the SQLite file ``db`` would lie on a network file system, else None
    (also when the mount table cannot be read)."""
    try:
        text = mounts_file.read_text(errors="replace")
    except OSError:
        return None
    where = _existing(db)
    fstype = network_fs_type(PurePosixPath(os.fspath(where)), parse_mounts(text))
    if fstype is None:
        return None
    return (
        f"the service's database {db} is on a network file system ({fstype}), where "
        "SQLite's locks may not hold: put it on a local volume (--db PATH or SIMRUN_DB), "
        "or give --db-on-network-fs to go on anyway"
    )


#: Below this many free bytes a volume of the service counts as full.
LOW_SPACE_BYTES = 1024 * 1024
#: SQLite's result codes of a write that found no room: SQLITE_FULL, and the shared memory
#: file that could not grow (SQLITE_IOERR_SHMSIZE).
SQLITE_NO_ROOM = frozenset({13, 4874})


class NoSpace(SimrunError, OSError):
    """A write of the service found its volume full: nothing of it was kept; the message
    names the volume, where it is mounted and its free bytes, in one line."""


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a write that found no room: ENOSPC
    or EDQUOT, SQLite's "database or disk is full"."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, NoSpace):
            return True
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(seen, sqlite3.Error) and seen.sqlite_errorcode in SQLITE_NO_ROOM:
            return True
        seen = seen.__cause__
    return False


@dataclass(frozen=True)
class Volume:
    """A directory the service writes to, by what it is to the user ("the store")."""

    what: str
    path: Path


def mount_point(path: Path) -> Path:
    """The mount point of the volume ``path`` (or its nearest existing parent) is on."""
    found = _nearest(path)
    while not os.path.ismount(found) and found != found.parent:
        found = found.parent
    return found


def free_space(path: Path) -> tuple[int, bool]:
    """The bytes an unprivileged write may still take on the volume of ``path``, and
    whether it has a free inode (a volume without inode counts has)."""
    stat = os.statvfs(_nearest(path))
    return stat.f_bavail * stat.f_frsize, not stat.f_files or stat.f_favail > 0


def _room(path: Path) -> int:
    """The free bytes of ``path``'s volume, 0 without a free inode."""
    free, inodes = free_space(path)
    return free if inodes else 0


def bytes_text(count: int) -> str:
    """A count of bytes with its binary unit, as the lines of a full volume say it."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count:,} bytes ({count / scale:.1f} {unit})"
    return f"{count:,} bytes"


def space_line(volume: Volume) -> str:
    """One line naming ``volume``: where it is mounted and its free bytes (blocking)."""
    free, inodes = free_space(volume.path)
    return (
        f"{volume.what} {volume.path} is on the volume mounted at {mount_point(volume.path)}, "
        f"with {bytes_text(free)} free{'' if inodes else ' but no free inode'}"
    )


def full_volume(exc: BaseException, volumes: Sequence[Volume]) -> Volume:
    """The volume of ``volumes`` that ``exc`` (a write that found no room) hit: the one of
    its file name (a copy's target: ``filename2``), else the one with the least free bytes
    (blocking)."""
    for name in (getattr(exc, "filename2", None), getattr(exc, "filename", None)):
        if not isinstance(name, str):
            continue
        for volume in volumes:
            if Path(name).absolute().is_relative_to(volume.path.absolute()):
                return volume
        break  # the file that took no more is elsewhere: see where space is short
    return min(volumes, key=lambda v: _room(v.path))


def low_space(volumes: Sequence[Volume]) -> str | None:
    """The line of the first of ``volumes`` below `LOW_SPACE_BYTES` free (or without a
    free inode), or None (blocking)."""
    for volume in volumes:
        if _room(volume.path) < LOW_SPACE_BYTES:
            return f"no space left: {space_line(volume)}"
    return None
