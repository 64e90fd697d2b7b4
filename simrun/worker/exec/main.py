"""``simrun-exec --job JOB.json [--report REPORT.json]``: run a `CommandSpec` and write its
`CommandResult` (always, once a report path is known). Exit codes: 0 the command succeeded;
1 it failed, was killed or timed out; 2 bad usage or job file; 3 no report written.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from simrun.worker.exec.run import CommandRun, default_report_path
from simrun.worker.exec.spec import (
    CommandResult,
    CommandSpec,
    JobFileError,
    read_json,
    write_json_atomic,
)

PROG = "simrun-exec"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_JOB = 2
EXIT_NO_REPORT = 3

#: Signals that make simrun-exec stop the command and report it killed.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Run the command of one unsplit simrun task: expand its argv template, run it "
            "without a shell under a memory limit for its whole process tree, and write a "
            "JSON report."
        ),
    )
    parser.add_argument("--job", required=True, type=Path, help="the job file (JSON)")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="where to write the report (default: the job's 'report', else "
        "TASK_DIR/logs/attempt-N.report.json)",
    )
    return parser


@contextmanager
def _forwarding_signals(run: CommandRun) -> Iterator[None]:
    """While inside, SIGTERM, SIGINT and SIGHUP stop the command instead of this process
    (signal handlers can only be set from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        run.request_stop()

    previous: dict[signal.Signals, _Handler] = {}
    try:
        for sig in _STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def _write_report(path: Path, result: CommandResult) -> bool:
    try:
        write_json_atomic(path, result.to_dict())
    except OSError as exc:
        _say(f"cannot write the report {str(path)!r}: {exc}")
        return False
    return True


def exec_main(argv: Sequence[str] | None = None) -> int:
    """Run ``simrun-exec`` with ``argv``; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and its error already
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_JOB
    job_path: Path = args.job
    report_arg: Path | None = args.report
    try:
        spec = CommandSpec.from_dict(read_json(job_path, "job file"))
    except JobFileError as exc:
        message = str(exc)
        if not message.startswith("job file"):
            message = f"job file {str(job_path)!r}: {message}"
        _say(message)
        if report_arg is not None:
            _write_report(report_arg, CommandResult.not_run(message))
        return EXIT_BAD_JOB
    run = CommandRun(spec)
    report_path = report_arg or run.spec.report or default_report_path(run.paths, spec.attempt)
    try:
        with _forwarding_signals(run):
            result = run.run()
    except Exception as exc:  # noqa: BLE001  # a bug here must still leave a report behind
        traceback.print_exc()
        message = f"simrun-exec failed: {type(exc).__name__}: {exc}"
        result = CommandResult.not_run(message, spec.limit_gb)
    if not _write_report(report_path, result):
        return EXIT_NO_REPORT
    if not result.ok:
        _say(result.error.splitlines()[0] if result.error else result.outcome)
        return EXIT_FAILED
    return EXIT_OK
