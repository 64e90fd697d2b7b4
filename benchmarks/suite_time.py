"""The wall time of the whole test suite at an earlier revision against this checkout, runs
interleaved, each side with the test command its README gives.

    python benchmarks/suite_time.py --before 1794215 --rounds 3

Each side is a git worktree under ``--workdir`` with a venv of its own (``pip install -e
'.[dev]'``, as the README says), so that the processes the tests spawn run that side's
code. The before side runs ``--before-command`` (the README's command at that revision:
``pytest -q``, sequential); this side runs ``--after-command`` (the README's command now).
Prints every run, then min / median / max per side and the ratio of the medians. The
machine is shared: compare only figures of one invocation.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worktree(workdir: Path, name: str, rev: str) -> Path:
    """A worktree of ``rev`` at ``workdir/name`` with its own venv (made once). ``rev`` is
    resolved in this checkout first: ``HEAD`` inside an existing worktree is its own."""
    path = workdir / name
    rev = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=REPO, check=True)
    else:
        subprocess.run(["git", "checkout", "--detach", "-q", rev], cwd=path, check=True)
    venv = path / ".venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "-e", ".[dev]"], cwd=path, check=True
    )
    return path


def run_suite(path: Path, command: str) -> tuple[float, str]:
    """Wall seconds of ``command`` in ``path`` under its venv, and pytest's last line."""
    venv = path / ".venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    start = time.perf_counter()
    done = subprocess.run(
        shlex.split(command), cwd=path, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return seconds, lines[-1] if lines else f"(no output, exit {done.returncode})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="1794215", help="the earlier revision")
    parser.add_argument("--after", default="HEAD", help="the revision to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/simrun-suite-time"))
    parser.add_argument("--before-command", default="pytest -q -p no:cacheprovider")
    parser.add_argument(
        "--after-command", default="pytest -q -p no:cacheprovider -n 4 --dist loadgroup"
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    sides = {
        "before": (worktree(args.workdir, "before", args.before), args.before_command),
        "after": (worktree(args.workdir, "after", args.after), args.after_command),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(1, args.rounds + 1):
        for name, (path, command) in sides.items():
            load = os.getloadavg()[0]
            seconds, last = run_suite(path, command)
            times[name].append(seconds)
            print(f"round {round_} {name:6s} {seconds:7.1f} s  (load {load:.2f})  {last}")
    print()
    for name, values in times.items():
        print(
            f"{name:6s} min {min(values):6.1f} s  median {statistics.median(values):6.1f} s  "
            f"max {max(values):6.1f} s   ({sides[name][1]})"
        )
    ratio = statistics.median(times["before"]) / statistics.median(times["after"])
    print(f"before / after (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
