"""The size of a task's inputs, as the dispatcher measures it for the learner
(`simrun.service.dispatch.input_bytes`), on real files."""

from __future__ import annotations

import os
from pathlib import Path

from simrun.service.dispatch import input_bytes


def test_files_and_directories_are_summed(tmp_path: Path) -> None:
    """A file counts its bytes; a directory the bytes of every file under it, at any depth."""
    (tmp_path / "a.txt").write_bytes(b"x" * 100)
    deep = tmp_path / "out" / "points" / "0"
    deep.mkdir(parents=True)
    (deep / "p.json").write_bytes(b"y" * 30)
    (tmp_path / "out" / "summary.csv").write_bytes(b"z" * 7)
    assert input_bytes([tmp_path / "a.txt", tmp_path / "out"]) == 137


def test_links_are_not_followed(tmp_path: Path) -> None:
    """A symbolic link inside an input counts as the link, not as what it points to."""
    big = tmp_path / "big"
    big.write_bytes(b"x" * 10_000)
    inputs = tmp_path / "in"
    inputs.mkdir()
    os.symlink(big, inputs / "link")
    assert input_bytes([inputs]) == os.lstat(inputs / "link").st_size


def test_no_input_or_a_missing_one_is_unknown(tmp_path: Path) -> None:
    """A task without inputs, or with an input that is not there, has no size (None): the
    learner then fits memory without sizes."""
    (tmp_path / "a").write_bytes(b"x")
    assert input_bytes([]) is None
    assert input_bytes([tmp_path / "a", tmp_path / "missing"]) is None
