"""Whether the service's SQLite file lies on a network file system, where its locks may not
hold (read from ``/proc/mounts``)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

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
    """``path`` resolved, through its nearest ancestor that exists."""
    path = path.absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.resolve() / path.relative_to(candidate)
    return path


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
