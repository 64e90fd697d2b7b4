"""The key a service and its workers share, and the HMAC-SHA256 that signs every job and
every report with it: what reaches Redis unsigned, or signed with another key, is refused
by whoever reads it. The key never goes through Redis: it comes from the environment, a
file, or the store both sides already share (made there on first use)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simrun.core.wire import PayloadError, deserialize, serialize
from simrun.errors import SimrunError

#: What a signed job payload starts with: the format's name and version.
MAGIC = b"SRS1"
DIGEST_BYTES = 32
#: The shortest key accepted (characters of its text).
MIN_KEY_CHARS = 32


class JobKeyError(SimrunError, ValueError):
    """A job key that cannot be used (missing file, too short, unreadable), and where."""


@dataclass(frozen=True)
class JobKey:
    """The shared secret; ``where`` says where it came from (never the key itself)."""

    secret: bytes = field(repr=False)
    where: str

    @classmethod
    def parse(cls, text: bytes, where: str) -> JobKey:
        """The key of a file's or variable's text (white space around it ignored)."""
        secret = text.strip()
        if len(secret) < MIN_KEY_CHARS:
            raise JobKeyError(
                f"the job key of {where} has {len(secret)} characters, fewer than "
                f"{MIN_KEY_CHARS}: make one with `python -c 'import secrets; "
                "print(secrets.token_hex(32))'`"
            )
        return cls(secret, where)

    @property
    def fingerprint(self) -> str:
        """A short digest of the key that logs may show: equal on both sides, or not."""
        return hashlib.sha256(b"simrun-key-id:" + self.secret).hexdigest()[:12]

    def tag(self, data: bytes) -> bytes:
        return hmac.digest(self.secret, data, "sha256")

    def seal(self, data: bytes) -> bytes:
        """``data`` with its signature in front."""
        return MAGIC + self.tag(data) + data

    def open(self, blob: bytes, what: str) -> bytes:
        """The data `seal` signed; `PayloadError` when ``blob`` is unsigned or signed with
        another key."""
        if not blob.startswith(MAGIC):
            if len(blob) >= 2 and blob[0] == 0x80 and blob[1] <= 5:
                deserialize(blob)  # raises the pickle's own refusal
            raise PayloadError(f"refused an unsigned {what}: every simrun job is signed")
        tag, data = blob[len(MAGIC) : len(MAGIC) + DIGEST_BYTES], blob[len(MAGIC) + DIGEST_BYTES :]
        if not hmac.compare_digest(tag, self.tag(data)):
            raise PayloadError(
                f"refused a {what} signed with another key (this side's key is {self.where}, "
                f"fingerprint {self.fingerprint}): the sender does not share this job key"
            )
        return data

    def sign_fields(self, fields: dict[str, str]) -> str:
        """The signature of string fields (a stream entry), as hex."""
        return self.tag(_canonical(fields)).hex()

    def check_fields(self, fields: dict[str, str], signature: str | None, what: str) -> None:
        """`PayloadError` unless ``signature`` is that of ``fields`` under this key."""
        if not signature:
            raise PayloadError(f"refused an unsigned {what}: every simrun report is signed")
        if not hmac.compare_digest(signature, self.sign_fields(fields)):
            raise PayloadError(
                f"refused a {what} signed with another key (this side's fingerprint "
                f"{self.fingerprint})"
            )


def _canonical(fields: dict[str, str]) -> bytes:
    """One unambiguous byte form of string fields: their JSON, keys sorted."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class JobCodec:
    """arq's job serializer and deserializer: msgpack, signed with ``key``."""

    key: JobKey

    def serialize(self, obj: Any) -> bytes:
        return self.key.seal(serialize(obj))

    def deserialize(self, blob: bytes) -> dict[str, Any]:
        return deserialize(self.key.open(blob, "job payload"))


def read_key_file(path: Path) -> JobKey:
    """The key in the file ``path`` (which must exist)."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise JobKeyError(f"cannot read the job key file {path}: {exc.strerror or exc}") from None
    return JobKey.parse(text, f"the file {path}")


def store_key(path: Path) -> JobKey:
    """The key of a store's key file ``path``, made there (mode 0600) when missing; two
    processes making it at once end with one key."""
    if path.exists():
        return read_key_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".simrun-key-", dir=path.parent)
    except OSError as exc:
        raise JobKeyError(
            f"cannot make the job key file {path}: {exc.strerror or exc} (give a key with "
            "SIMRUN_JOB_KEY or --job-key-file)"
        ) from None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
        # atomic, and never over a key another process made meanwhile (then it is read)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return read_key_file(path)


def resolve_key(text: str | None, file: Path | None, store_file: Path) -> JobKey:
    """The key of a process: ``text`` (SIMRUN_JOB_KEY), else the file given, else the
    store's own key file (made when missing)."""
    if text:
        return JobKey.parse(text.encode(), "SIMRUN_JOB_KEY")
    if file is not None:
        return read_key_file(file)
    return store_key(store_file)
