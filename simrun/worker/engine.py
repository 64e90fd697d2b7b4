"""Running a command (or a whole worker) in a task's image through docker or podman: the
engine's command lines (pure, each path mounted at its own path), whether its OOM killer
ended a container, and removing it."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from simrun.core.sizing import GIB
from simrun.errors import SimrunError

#: The engines looked for on ``PATH``, in this order, when none is named.
ENGINE_NAMES = ("docker", "podman")
#: Seconds an ``inspect`` or ``rm`` of the engine may take.
_ENGINE_CALL_S = 30.0


class EngineError(SimrunError, ValueError):
    """The engine named cannot be used; the message says which and why."""


def find_engine(named: str | None, path: str | None = None) -> str | None:
    """The engine's executable: ``named`` (`EngineError` if not found), else the first found."""
    for name in (named,) if named else ENGINE_NAMES:
        if (found := shutil.which(name, path=path)) is not None:
            return found
    if named:
        raise EngineError(f"container engine {named!r} not found (SIMRUN_ENGINE / --engine)")
    return None


def container_name() -> str:
    return f"simrun-{uuid.uuid4().hex[:16]}"


def _mounts(dirs: Sequence[Path]) -> list[str]:
    """``-v D:D`` for each directory, none inside another listed one, in order."""
    kept: list[Path] = []
    for d in sorted({Path(d) for d in dirs}, key=lambda p: (len(p.parts), str(p))):
        if not any(k == d or k in d.parents for k in kept):
            kept.append(d)
    return [a for d in kept for a in ("-v", f"{d}:{d}")]


def run_argv(
    engine: str,
    image: str,
    argv: Sequence[str],
    *,
    name: str,
    limit_gb: float,
    workdir: Path,
    mounts: Sequence[Path],
    environ: Mapping[str, str],
    options: Sequence[str] = (),
) -> list[str]:
    """The engine's command line that runs ``argv`` in ``image`` as container ``name``, bounded
    by ``limit_gb`` (kept after it ends, for `inspect_argv`, unless ``options`` say --rm);
    ``options`` come last before the image, so an ``--entrypoint`` stands next to it."""
    limit = f"{max(1, int(limit_gb * GIB))}b"
    variables = [a for key in sorted(environ) for a in ("-e", f"{key}={environ[key]}")]
    return [
        engine, "run", "--name", name, "--memory", limit, "--memory-swap", limit,
        *_mounts(mounts), "-w", str(workdir), *variables, *options, image, *argv,
    ]  # fmt: skip


def worker_argv_in_image(
    engine: str,
    image: str,
    worker_args: Sequence[str],
    *,
    name: str,
    memory_gb: float,
    workdir: Path,
    mounts: Sequence[Path],
    environ: Mapping[str, str],
) -> list[str]:
    """The engine's command line that runs ``simrun worker WORKER_ARGS`` in ``image`` (which
    holds simrun), removed when it ends, on the host's network (for the embedded Redis)."""
    options = ("--rm", "--network", "host", "--entrypoint", "simrun")
    return run_argv(
        engine, image, ["worker", *worker_args], name=name, limit_gb=memory_gb, workdir=workdir,
        mounts=mounts, environ=environ, options=options,
    )  # fmt: skip


def inspect_argv(engine: str, name: str) -> list[str]:
    """The command line that prints whether the engine's OOM killer ended a container."""
    return [engine, "inspect", "--format", "{{.State.OOMKilled}}", name]


def remove_argv(engine: str, name: str) -> list[str]:
    return [engine, "rm", "-f", name]


def parse_oom(text: str) -> bool:
    """Whether ``inspect``'s output says the container was OOM-killed."""
    return text.strip().lower() == "true"


def _call(argv: list[str]) -> subprocess.CompletedProcess[str] | str:
    """Run one short engine call; what it did, or why it could not run."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=_ENGINE_CALL_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)


def inspect_oom(engine: str, name: str) -> bool | None:
    """Whether the container was OOM-killed; None when the engine cannot tell."""
    done = _call(inspect_argv(engine, name))
    if isinstance(done, str) or done.returncode != 0:
        return None
    return parse_oom(done.stdout)


def remove(engine: str, name: str) -> str | None:
    """Remove a container; None when done, else one line saying what failed."""
    done = _call(remove_argv(engine, name))
    if isinstance(done, str):
        return f"{engine} rm {name}: {done}"
    if done.returncode != 0:
        return f"{engine} rm {name}: exit code {done.returncode}: {done.stderr.strip()[-200:]}"
    return None
