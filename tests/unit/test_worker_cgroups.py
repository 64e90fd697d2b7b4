"""The pure parts of simrun.worker.cgroups: reading the kernel's cgroup files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simrun.worker.cgroups import (
    Mount,
    cgroup_dir,
    limit_text,
    oom_killed,
    owner_of,
    parse_limit,
    parse_mountinfo,
    parse_oom_kills,
    parse_proc_cgroup,
)

V1_PROC = "9:name=systemd:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x\n0::/\n"
MOUNTINFO = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
    "50 31 0:40 /kubepods/pod1 /sys/fs/cgroup/with\\040space rw - cgroup2 cgroup2 rw\n"
)


def test_proc_cgroup_maps_each_controller_to_its_path() -> None:
    """Each controller of a line gets its path; the v2 line (``0::``) is under ""."""
    assert parse_proc_cgroup(V1_PROC) == {
        "name=systemd": "/",
        "memory": "/process_api/abc",
        "cpu": "/x",
        "cpuacct": "/x",
        "": "/",
    }
    assert parse_proc_cgroup("0::/user.slice/x.scope\n") == {"": "/user.slice/x.scope"}
    assert parse_proc_cgroup("garbage\n") == {}


def test_mountinfo_lists_the_cgroup_mounts_only() -> None:
    """tmpfs is left out; optional fields before ``-`` and octal escapes are handled."""
    assert parse_mountinfo(MOUNTINFO) == [
        Mount("/sys/fs/cgroup/memory", "/", "cgroup", ("rw", "memory")),
        Mount("/sys/fs/cgroup/unified", "/", "cgroup2", ("rw",)),
        Mount("/sys/fs/cgroup/with space", "/kubepods/pod1", "cgroup2", ("rw",)),
    ]


@pytest.mark.parametrize(
    ("root", "path", "expected"),
    [
        ("/", "/process_api/abc", "/m/process_api/abc"),
        ("/", "/", "/m"),
        ("/kubepods/pod1", "/kubepods/pod1", "/m"),
        ("/kubepods/pod1", "/kubepods/pod1/c", "/m/c"),
        ("/kubepods/pod1", "/kubepods/pod10", None),
        ("/kubepods/pod1", "/other", None),
    ],
)
def test_cgroup_dir_is_the_path_below_the_mount_root(
    root: str, path: str, expected: str | None
) -> None:
    """A cgroup's directory is its path relative to the root the mount shows; None when
    the mount does not show it."""
    found = cgroup_dir(Mount("/m", root, "cgroup2", ()), path)
    assert found == (None if expected is None else Path(expected))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3),
        ("oom_kill_disable 0\nunder_oom 1\n", None),  # a kernel before 4.13
        ("oom_kill x\n", None),
        ("", None),
    ],
)
def test_oom_control_gives_the_oom_kill_counter(text: str, expected: int | None) -> None:
    """v1 ``memory.oom_control``: the ``oom_kill`` line, None where the kernel has none."""
    assert parse_oom_kills(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n", 1),
        ("low 0\nhigh 0\nmax 0\noom 0\n", None),
    ],
)
def test_memory_events_gives_the_oom_kill_counter(text: str, expected: int | None) -> None:
    """v2 ``memory.events``: the ``oom_kill`` line (not ``oom`` nor ``oom_group_kill``)."""
    assert parse_oom_kills(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max\n", None),
        ("9223372036854771712\n", None),  # v1's "no limit"
        ("268435456\n", 268435456),
    ],
)
def test_limits_parse_with_no_limit_as_none(text: str, expected: int | None) -> None:
    """``max`` (v2) and v1's huge value are no limit."""
    assert parse_limit(text) == expected


@pytest.mark.parametrize(
    ("version", "limit", "expected"),
    [(1, None, "-1"), (2, None, "max"), (1, 1024, "1024"), (2, 1024, "1024")],
)
def test_limit_text_writes_no_limit_per_version(
    version: int, limit: int | None, expected: str
) -> None:
    """No limit is ``-1`` for v1 and ``max`` for v2."""
    assert limit_text(version, limit) == expected


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [(0, 1, True), (1, 1, False), (None, 1, False), (0, None, False), (2, 5, True)],
)
def test_oom_killed_when_the_counter_went_up(
    before: int | None, after: int | None, expected: bool
) -> None:
    """Only a counter read both times and higher the second time says the kernel killed."""
    assert oom_killed(before, after) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("simrun-w123-456", (123, 456)),
        ("simrun-w123-456-exec", (123, 456)),
        ("simrun-w123-456-ex-ec", None),
        ("simrun-wprobe-1-abc", None),
        ("simrun-w123", None),
        ("other", None),
    ],
)
def test_owner_of_an_area_is_its_pid_and_start_time(
    name: str, expected: tuple[int, int] | None
) -> None:
    """Only ``simrun-w<pid>-<start>`` (with an optional ``-<tag>``) names an owner (the
    sweep leaves anything else)."""
    assert owner_of(name) == expected
