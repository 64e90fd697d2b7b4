"""Commands for the tests of what a ``simrun-exec`` command does beyond its own process
(`tests.e2e.test_exec_bounds`). Run as a script: ``python exec_commands.py MODE ARGS...``.

* ``escape PID_FILE MB WAIT_S [private|shared]``: starts a daemon that escapes the
  command's process tree and group the classic way (fork, ``setsid``, fork again, the
  middle process exits so the daemon is an orphan adopted by init or a subreaper). The
  daemon writes its pid to ``PID_FILE``, then writes ``MB`` MiB in 10 MiB steps
  (``private``: ordinary anonymous memory, what a sampler sees; ``shared``: a
  ``MAP_SHARED`` anonymous mapping, charged to the cgroup but not ``RssAnon``, so only the
  kernel's limit stops it) and sleeps for ten minutes. The command waits until the pid file
  is written, then sleeps ``WAIT_S`` seconds and exits 0.
* ``chatty MB``: writes ``MB`` MiB to stdout and as much to stderr, each starting with a
  line ``HEAD <stream>`` and ending with a line ``TAIL <stream>``.
"""

from __future__ import annotations

import mmap
import os
import sys
import time

MIB = 2**20
_STEP = 10 * MIB


def _daemon(pid_file: str, mb: int, kind: str) -> None:
    """The escaped grandchild: hold ``mb`` MiB, then sleep."""
    tmp = pid_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(tmp, pid_file)
    held: list[object] = []
    for _ in range(mb * MIB // _STEP):
        if kind == "shared":
            block = mmap.mmap(-1, _STEP, flags=mmap.MAP_SHARED)
            for i in range(0, _STEP, 4096):
                block[i] = 1
            held.append(block)
        else:
            held.append(b"\1" * _STEP)
        time.sleep(0.005)
    time.sleep(600)


def escape(pid_file: str, mb: int, wait_s: float, kind: str = "private") -> None:
    if os.fork() == 0:  # the middle process: a new session, a fork, and gone
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            try:
                _daemon(pid_file, mb, kind)
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()  # the middle process
    while not os.path.exists(pid_file):
        time.sleep(0.01)
    time.sleep(wait_s)


def chatty(mb: int) -> None:
    line = b"x" * 1023 + b"\n"
    for stream, name in ((sys.stdout.buffer, "out"), (sys.stderr.buffer, "err")):
        stream.write(f"HEAD {name}\n".encode())
        for _ in range(mb * 1024):
            stream.write(line)
        stream.write(f"TAIL {name}\n".encode())
        stream.flush()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "escape":
        escape(args[0], int(args[1]), float(args[2]), *args[3:])
    elif mode == "chatty":
        chatty(int(args[0]))
    else:
        sys.exit(f"unknown mode {mode!r}")
