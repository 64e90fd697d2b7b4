"""A fake container engine for the tests: ``docker``/``podman`` as simrun calls them.

`install` writes an executable named ``docker`` (or another name) into a directory; it runs
``python -m tests.support.fake_engine``, which:

* ``run [--rm] [--name N] [--network NET] [--memory M] [--memory-swap M] [-v A:B]...
  [-w DIR] [-e K=V]... [--entrypoint E] IMAGE ARGV...``: appends its argv (JSON, one line)
  to ``FAKE_ENGINE_LOG``, runs [E] ARGV here in DIR with the ``-e`` variables (the
  entry point ``simrun`` is this Python's simrun), forwards SIGTERM and SIGINT to it, and
  exits as it did. A command that exits with code 137 stands for one the engine's OOM
  killer ended: ``inspect`` then says ``true``;
* ``inspect --format F NAME``: ``true`` or ``false`` (exit 1 for an unknown container);
* ``rm -f NAME``: forgets the container (its argv is logged too).

The containers' states are files beside the log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

LOG_VARIABLE = "FAKE_ENGINE_LOG"
OOM_EXIT = 137


def install(bin_dir: Path, log: Path, name: str = "docker") -> Path:
    """Write the fake engine as ``bin_dir/name``; its calls are logged to ``log``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[2]
    exe = bin_dir / name
    exe.write_text(
        "#!/bin/sh\n"
        f"export {LOG_VARIABLE}='{log}'\n"
        f"export PYTHONPATH='{repo}'${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"exec '{sys.executable}' -m tests.support.fake_engine \"$@\"\n"
    )
    exe.chmod(0o755)
    return exe


def calls(log: Path) -> list[list[str]]:
    """The argv of each call of the fake engine, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def _state(log: Path, name: str) -> Path:
    return log.with_name(f"{log.name}.{name}.state")


def _run(log: Path, args: list[str]) -> int:
    name, workdir, env, entry = "", None, dict(os.environ), []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("--rm", "-i"):
            i += 1
            continue
        flag, value = args[i], args[i + 1]
        if flag == "--name":
            name = value
        elif flag == "-w":
            workdir = value
        elif flag == "-e":
            key, _, val = value.partition("=")
            env[key] = val
        elif flag == "--entrypoint":
            entry = [sys.executable, "-m", "simrun.cli"] if value == "simrun" else [value]
        i += 2
    argv = [*entry, *args[i + 1 :]]  # past the image
    child = subprocess.Popen(argv, cwd=workdir, env=env)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    if name:
        _state(log, name).write_text("true" if code == OOM_EXIT else "false")
    return code


def main(argv: list[str]) -> int:
    log = Path(os.environ[LOG_VARIABLE])
    with log.open("a") as fh:
        fh.write(json.dumps(argv) + "\n")
    command, args = argv[0], argv[1:]
    if command == "run":
        return _run(log, args)
    if command == "inspect":
        state = _state(log, args[-1])
        if not state.exists():
            print(f"no such container {args[-1]}", file=sys.stderr)
            return 1
        print(state.read_text())
        return 0
    if command == "rm":
        _state(log, args[-1]).unlink(missing_ok=True)
        return 0
    print(f"fake engine: unknown command {command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
