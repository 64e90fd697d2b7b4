"""Which file system the service's SQLite file lies on (`simrun.service.volumes`): the
mount table read as text, pure."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from simrun.service.volumes import mount_type, network_fs_type, parse_mounts

MOUNTS = """\
overlay / overlay rw,relatime 0 0
proc /proc proc rw 0 0
server:/export /store nfs4 rw,vers=4.2 0 0
/dev/sdb1 /store/local ext4 rw 0 0
//nas/share /mnt/my\\040share cifs rw 0 0
host:/x /mnt/ssh fuse.sshfs rw 0 0
tmpfs /var/lib/simrun tmpfs rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "fstype", "network"),
    [
        ("/store/simrun.db", "nfs4", "nfs4"),
        ("/store", "nfs4", "nfs4"),
        ("/store/local/simrun.db", "ext4", None),
        ("/storex/simrun.db", "overlay", None),
        ("/mnt/my share/simrun.db", "cifs", "cifs"),
        ("/mnt/ssh/a/b.db", "fuse.sshfs", "fuse.sshfs"),
        ("/var/lib/simrun/simrun.db", "tmpfs", None),
        ("/home/u/simrun-store/simrun.db", "overlay", None),
    ],
)
def test_the_longest_mount_point_holding_the_path_tells_its_type(
    path: str, fstype: str, network: str | None
) -> None:
    """A path is on the file system of its longest mount point (a local disk mounted inside
    an NFS share is local; a name that only starts like a mount point is not inside it);
    nfs, cifs, sshfs and the like are network file systems, others are not."""
    mounts = parse_mounts(MOUNTS)
    assert mount_type(PurePosixPath(path), mounts) == fstype
    assert network_fs_type(PurePosixPath(path), mounts) == network


def test_the_last_mount_on_one_point_wins() -> None:
    """Two mounts on one point: the later one (over the first) is the one seen."""
    mounts = parse_mounts("a /data ext4 rw 0 0\nb:/x /data nfs rw 0 0\n")
    assert network_fs_type(PurePosixPath("/data/simrun.db"), mounts) == "nfs"


def test_no_mount_table_means_nothing_known() -> None:
    """With no mount holding the path, its type is unknown and not taken as network."""
    assert mount_type(PurePosixPath("/x"), []) is None
    assert network_fs_type(PurePosixPath("/x"), []) is None
