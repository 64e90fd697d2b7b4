"""The job key and its signatures (`simrun.core.signing`): what one key signed opens only
with it; the key of a process comes from the environment, a file or the store."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from simrun.core.signing import JobCodec, JobKey, JobKeyError, resolve_key, store_key
from simrun.core.wire import PayloadError, serialize
from tests.support.keys import TEST_KEY

OTHER = JobKey.parse(b"another-key-of-at-least-32-characters", "another")


def test_a_payload_opens_only_with_the_key_that_signed_it() -> None:
    """A signed payload opens with its key; a flipped byte, no signature or another key is
    refused naming which."""
    codec = JobCodec(TEST_KEY)
    blob = codec.serialize({"a": 1})
    assert codec.deserialize(blob) == {"a": 1}
    with pytest.raises(PayloadError, match="signed with another key"):
        JobCodec(OTHER).deserialize(blob)
    with pytest.raises(PayloadError, match="signed with another key"):
        codec.deserialize(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(PayloadError, match="unsigned job payload"):
        codec.deserialize(serialize({"a": 1}))
    with pytest.raises(PayloadError, match="pickle"):
        codec.deserialize(b"\x80\x04\x95rest")


def test_fields_sign_as_a_whole() -> None:
    """The signature of stream fields covers every name and value: a changed value, a field
    added or removed, or a value moved across a field boundary fails the check."""
    fields = {"a": "1", "b": "2"}
    sig = TEST_KEY.sign_fields(fields)
    TEST_KEY.check_fields(dict(fields), sig, "entry")
    for changed in ({"a": "1", "b": "3"}, {"a": "1"}, {**fields, "c": ""}, {"a": "12", "b": ""}):
        with pytest.raises(PayloadError, match="another key"):
            TEST_KEY.check_fields(changed, sig, "entry")
    with pytest.raises(PayloadError, match="unsigned"):
        TEST_KEY.check_fields(fields, None, "entry")


@pytest.mark.parametrize("text", [b"", b"short", b"  " + b"x" * 31 + b"\n"])
def test_a_short_key_is_refused_naming_where_it_came_from(text: bytes) -> None:
    """A key of fewer than 32 characters (white space around it aside) is refused, the
    message naming its origin and how to make one."""
    with pytest.raises(JobKeyError, match=r"the job key of SRC has \d+ characters.*secrets"):
        JobKey.parse(text, "SRC")


def test_the_store_key_is_made_once_private_and_shared(tmp_path: Path) -> None:
    """The store's key file is made on first use with mode 0600 (its directory too), later
    uses read the same key, and processes racing to make it end with one key."""
    path = tmp_path / "new-store" / ".simrun-job.key"
    first = store_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store_key(path).secret == first.secret
    assert first.where == f"the file {path}"

    racing = tmp_path / "race" / ".simrun-job.key"
    found: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: found.append(store_key(racing).secret)) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1
    assert sorted(os.listdir(racing.parent)) == [".simrun-job.key"]  # no temporary left


def test_a_process_key_comes_from_the_environment_then_a_file_then_the_store(
    tmp_path: Path,
) -> None:
    """SIMRUN_JOB_KEY wins, then --job-key-file, then the store's file; a file given that
    is missing is an error naming it, never replaced by a new key."""
    given = tmp_path / "given.key"
    given.write_text("f" * 40 + "\n")
    store_file = tmp_path / "store" / ".simrun-job.key"
    assert resolve_key("e" * 40, given, store_file).secret == b"e" * 40
    assert resolve_key(None, given, store_file).secret == b"f" * 40
    assert not store_file.exists()
    assert resolve_key(None, None, store_file).where == f"the file {store_file}"
    with pytest.raises(JobKeyError, match=r"cannot read the job key file .*missing\.key"):
        resolve_key(None, tmp_path / "missing.key", store_file)


def test_a_key_never_shows_in_its_repr() -> None:
    """Logs may print a key's repr or fingerprint, never its secret."""
    assert "simrun-tests" not in repr(TEST_KEY)
    assert TEST_KEY.fingerprint != OTHER.fingerprint
    assert len(TEST_KEY.fingerprint) == 12
