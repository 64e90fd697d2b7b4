"""The messages between a worker container and its worker processes.

Each message is a msgpack map preceded by its length (4 bytes, big endian). The container
writes to a process's stdin and reads its replies from the process's stdout; the process
moves its own ``sys.stdout`` to stderr first, so a plugin that prints cannot garble them.

Requests (container → process):

* ``{"op": "task", "run", "task", "task_type", "settings", "paths", "setup": bool}``: work
  on this task from now on; run the type's ``setup`` when asked and this process has not
  run it for this task yet. One reply.
* ``{"op": "units", "indices": [int, ...]}``: compute these units of the current task, in
  order. One reply per unit, written as soon as that unit ends (with ``"index"`` added), so
  the container always knows which unit is running; a failing unit does not stop the
  others. A request without a list of indices gets one failed reply with index None.
* ``{"op": "merge"}``: run the merge of the current task. One reply.

A reply is ``{"ok": bool, "seconds": float, "error": str | None}``; ``seconds`` is the
wall time of the plugin call alone. At start the process sends ``{"ok": bool, "pid": int,
"error": str | None, "baseline_bytes": int}`` once it has loaded the plugins it was given;
``baseline_bytes`` is its anonymous memory measured before it loaded them (0 when unknown).
"""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

import msgpack

from simrun.core.jobs import JobSpec

__all__ = [
    "MAX_MESSAGE_BYTES",
    "ProtocolError",
    "encode",
    "read_async",
    "read_blocking",
    "task_message",
]

_HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 2**20


class ProtocolError(RuntimeError):
    """A message that breaks the framing (the other side is not a simrun worker process)."""


def encode(message: dict[str, Any]) -> bytes:
    """One framed message."""
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


async def read_async(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; `asyncio.IncompleteReadError` when the writer is gone."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return _decode(await reader.readexactly(_check_size(size)))


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_blocking(fd: int) -> dict[str, Any] | None:
    """The next message from ``fd``; None at end of file (the container is gone)."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(fd, _check_size(size))
    if body is None:
        return None
    return _decode(body)


def write_blocking(fd: int, message: dict[str, Any]) -> None:
    """Write one message to ``fd`` completely."""
    data = memoryview(encode(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def task_message(spec: JobSpec, setup: bool) -> dict[str, object]:
    """The request that opens the task of ``spec`` on a worker process (running the type's
    ``setup`` there when ``setup``); its units or merge follow."""
    return {
        "op": "task",
        "run": spec.run,
        "task": spec.task,
        "task_type": spec.task_type,
        "settings": spec.settings,
        "paths": spec.paths.to_dict(),
        "setup": setup,
    }
