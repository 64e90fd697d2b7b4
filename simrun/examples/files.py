"""Reading JSON files with one error for every way they fail, and writing files so that a
reader sees either the old content or the whole new one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class JsonFileError(ValueError):
    """A JSON file that could not be read (``unreadable``) or is not valid JSON; ``detail``
    says what went wrong."""

    def __init__(self, unreadable: bool, detail: str) -> None:
        super().__init__(detail)
        self.unreadable, self.detail = unreadable, detail


def read_json(path: Path) -> Any:
    """The JSON document in the file at ``path``; `JsonFileError` when there is none."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise JsonFileError(True, str(exc.strerror or exc)) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JsonFileError(False, str(exc)) from exc


def write_atomic(path: Path, data: bytes) -> None:
    """Put ``data`` at ``path`` in one step: a hidden temporary file beside it, flushed,
    then renamed (removed when anything fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private; outputs are read by other processes of the run.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
