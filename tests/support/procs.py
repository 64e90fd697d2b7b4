"""Reading processes from /proc, as the tests that check that none is left behind do
(independent of `simrun.worker.proctree`, which they check)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tests.support.wait import WaitTimeout, wait_until


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def wait_dead(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether ``pid`` is gone within ``timeout_s`` (a SIGKILLed process takes a moment)."""
    with contextlib.suppress(WaitTimeout):  # the caller says what outlived its time
        wait_until(lambda: not alive(pid), timeout_s=timeout_s, what=f"{pid} gone", poll_s=0.02)
    return not alive(pid)
