"""The layout of a store, what a task or source name may be, and input references."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from simrun.plugins import TaskPaths

#: The name of the service's SQLite file in a store.
DB_NAME = "simrun.db"
MAX_NAME_LENGTH = 100
SOURCE_PREFIX = "source:"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a task or source (it becomes a directory), or None."""
    if not isinstance(name, str) or not name.strip():
        return "is empty"
    if name != name.strip():
        return f"{name!r} has leading or trailing spaces"
    if name in {".", ".."} or ".." in name:
        return f"{name!r} contains '..'"
    if "/" in name or "\\" in name:
        return f"{name!r} contains a path separator"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"{name!r} contains a control character"
    if name.startswith(("-", ".")):
        return f"{name!r} starts with {name[0]!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"is longer than {MAX_NAME_LENGTH} characters"
    return None


def task_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a task: a `name_problem`, or a '.' or ':' (separators of
    inputs and ``--set``)."""
    why = name_problem(name)
    if why is not None or not isinstance(name, str):
        return why
    if "." in name:
        return (
            f"{name!r} contains '.', which separates a task from its port in an input "
            "('task.port') and from its setting in --set TASK.SETTING=VALUE; use '-' or '_'"
        )
    if ":" in name:
        return f"{name!r} contains ':', which marks a source in an input ('source:name')"
    return None


def split_task(text: str) -> tuple[str, str]:
    """``task.rest`` (an input's ``task.port``, a ``--set``'s ``task.setting``) as its task
    and the rest: the one parser of both."""
    task, _, rest = text.partition(".")
    return task, rest


@dataclass(frozen=True)
class InputRef:
    """A parsed input reference: ``"task.port"`` or ``"source:name"``."""

    kind: Literal["task", "source"]
    name: str
    port: str = ""

    @classmethod
    def parse(cls, ref: str) -> InputRef | None:
        """The reference, or None when it has neither form."""
        if ref.startswith(SOURCE_PREFIX):
            name = ref.removeprefix(SOURCE_PREFIX)
            return cls("source", name) if name else None
        task, port = split_task(ref)
        return cls("task", task, port) if task and port.isidentifier() else None

    @classmethod
    def of(cls, ref: str) -> InputRef:
        """The reference of a checked document (`ValueError` when it has neither form)."""
        parsed = cls.parse(ref)
        if parsed is None:
            raise ValueError(f"input {ref!r} is neither 'task.port' nor 'source:name'")
        return parsed


def task_logs(task_dir: Path) -> Path:
    """The directory of the logs of a task's attempts (under its task directory)."""
    return task_dir / "logs"


@dataclass(frozen=True)
class StoreLayout:
    """Where the files of the store at ``root`` live (``simrun.db``, ``logs/``, ``runs/``)."""

    root: Path

    @property
    def db(self) -> Path:
        """The service's SQLite file: run state and learned resources."""
        return self.root / DB_NAME

    @property
    def job_key(self) -> Path:
        """The key that signs the jobs and reports of the store's service and workers,
        when no other is given (`simrun.core.signing.store_key`)."""
        return self.root / ".simrun-job.key"

    @property
    def lock(self) -> Path:
        """The lock file of the `simrun run` session using the store."""
        return self.root / ".simrun.lock"

    @property
    def logs(self) -> Path:
        """The logs of the embedded service and workers."""
        return self.root / "logs"

    @property
    def runs(self) -> Path:
        return self.run_dir("_").parent

    def run_dir(self, run: str) -> Path:
        return self.task_paths(run, "_").run_dir

    def sources(self, run: str) -> Path:
        """The directory of the copies of run ``run``'s sources."""
        return self.run_dir(run) / "sources"

    def task_paths(
        self,
        run: str,
        task: str,
        inputs: dict[str, Path] | None = None,
        scratch: Path | None = None,
    ) -> TaskPaths:
        """The directories of task ``task`` of run ``run`` (`TaskPaths.for_task`)."""
        return TaskPaths.for_task(self.root, run, task, inputs, scratch)

    def task_dir(self, run: str, task: str) -> Path:
        return self.task_paths(run, task).task_dir

    def task_out(self, run: str, task: str) -> Path:
        return self.task_paths(run, task).out

    def is_store(self) -> bool:
        """Whether ``root`` is a store: a service has made its SQLite file there."""
        return self.db.is_file()
