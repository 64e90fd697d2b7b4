"""The messages between a worker container and its worker processes: msgpack maps framed by
a 4-byte big-endian length on the process's stdin and stdout. A request opens a ``task``,
runs its ``merge`` or computes ``units`` (answered after each failure and at the end); the
unit running is in the `UnitSlot`."""

from __future__ import annotations

import asyncio
import mmap
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from simrun.errors import SimrunError

if TYPE_CHECKING:  # the worker process needs none of the wire models (its start-up time)
    from simrun.core.jobs import JobSpec

_HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 2**20
#: Tasks a worker process remembers with their setup done; an older one is set up again.
MAX_TASKS = 16


class ProtocolError(SimrunError, RuntimeError):
    """A message that breaks the framing (the other side is not a simrun worker process)."""


def encode(message: dict[str, Any]) -> bytes:
    body: bytes = msgpack.packb(message, use_bin_type=True)
    return _HEADER.pack(len(body)) + body


def _decode(body: bytes) -> dict[str, Any]:
    message = msgpack.unpackb(body, raw=False)
    if not isinstance(message, dict):
        raise ProtocolError(f"a message is a {type(message).__name__}, not a map")
    return message


def _check_size(size: int) -> int:
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a message announces {size} bytes, more than {MAX_MESSAGE_BYTES}")
    return size


def decode_one(data: bytes) -> dict[str, Any]:
    """The one message ``data`` holds (a process's whole output); `ProtocolError` else."""
    if len(data) < _HEADER.size:
        raise ProtocolError(f"{len(data)} bytes hold no message")
    (size,) = _HEADER.unpack(data[: _HEADER.size])
    if len(data) != _HEADER.size + _check_size(size):
        raise ProtocolError(f"a message announces {size} bytes, {len(data) - 4} follow")
    return _decode(data[_HEADER.size :])


async def read_async(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; `asyncio.IncompleteReadError` when the writer is gone."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return _decode(await reader.readexactly(_check_size(size)))


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_blocking(fd: int) -> dict[str, Any] | None:
    """The next message from ``fd``; None at end of file (the container is gone)."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(fd, _check_size(size))
    return None if body is None else _decode(body)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_blocking(fd: int, message: dict[str, Any]) -> None:
    write_all(fd, encode(message))


_SLOT = struct.Struct("<qqdd")


class UnitSlot:
    """Shared memory a worker process writes and the container reads: the batch and position
    of the unit running, when it started, and the seconds of those that ended well."""

    size = _SLOT.size

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, _SLOT.size)

    @classmethod
    def create(cls) -> tuple[UnitSlot, int]:
        """A new slot and the fd to give the process (close it once the process started)."""
        fd = os.memfd_create("simrun-unit-slot", os.MFD_CLOEXEC)
        os.ftruncate(fd, _SLOT.size)
        return cls(fd), fd

    def write(self, batch: int, pos: int, started: float, done_s: float) -> None:
        _SLOT.pack_into(self._map, 0, batch, pos, started, done_s)

    def read(self) -> tuple[int, int, float, float]:
        """(batch, pos, started, done_s), read until two reads agree."""
        first = _SLOT.unpack_from(self._map, 0)
        while True:
            again = _SLOT.unpack_from(self._map, 0)
            if again == first:
                return again
            first = again

    def close(self) -> None:
        self._map.close()


def task_message(spec: JobSpec, setup: bool) -> dict[str, object]:
    """The request that opens the task of ``spec`` on a worker process (with its setup)."""
    return {
        "op": "task",
        "run": spec.run,
        "task": spec.task,
        "task_type": spec.task_type,
        "settings": spec.settings,
        "paths": spec.paths.model_dump(),
        "setup": setup,
    }


@dataclass(frozen=True)
class InstalledType:
    """What a worker knows of a task type installed on it (`catalog_message`): its command
    template (None: splittable), or why it cannot be loaded here (``problem``)."""

    name: str
    command: str | None = None
    problem: str | None = None


def catalog_message(types: dict[str, tuple[str | None, str | None]]) -> dict[str, object]:
    """The answer of ``child --catalog``: each type's (command, problem)."""
    return {"ok": True, "types": {n: [c, p] for n, (c, p) in types.items()}}


def parse_catalog(message: dict[str, Any]) -> dict[str, InstalledType]:
    """The installed types of a `catalog_message`; `ProtocolError` for another message."""
    types = message.get("types")
    if not message.get("ok") or not isinstance(types, dict):
        raise ProtocolError(f"no catalog of task types: {message.get('error') or message!r}")
    found: dict[str, InstalledType] = {}
    for name, entry in types.items():
        ok = isinstance(entry, list) and len(entry) == 2
        if not (
            ok and isinstance(name, str) and all(v is None or isinstance(v, str) for v in entry)
        ):
            raise ProtocolError(f"the catalog's entry {name!r} is {entry!r}")
        found[name] = InstalledType(name, entry[0], entry[1])
    return found
