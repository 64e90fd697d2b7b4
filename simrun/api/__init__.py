"""The Python API, for scripts and notebooks: `submit` a workflow (a path, YAML or JSON text,
a dict) to a service, or `run_local` it (a `LocalSession`) as ``simrun run`` does, and wait
for a `RunResult`; blocking calls on a loop of their own (`simrun.api.bridge`): Jupyter too."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from simrun.api.bridge import Bridge
from simrun.api.runs import Run, RunResult, RunTimeout, remote
from simrun.app.prepare import Prepared, WorkflowInput, prepare, prepare_to_send
from simrun.app.types import load_types_from_here
from simrun.client import Client, Rejected
from simrun.config import DEFAULT_STORE, DEFAULT_URL, ENV_STORE, ENV_TOKEN, ENV_URL
from simrun.core.timing import DEFAULT_GRACE_S
from simrun.local.machine import LocalError
from simrun.workflow import WorkflowError

if TYPE_CHECKING:
    from simrun.local.session import EmbeddedSession
    from simrun.local.settings import LocalOptions
    from simrun.plugins import TaskType

__all__ = [
    "InterruptedRuns",
    "LocalError",
    "LocalSession",
    "Run",
    "RunResult",
    "RunTimeout",
    "WorkflowError",
    "WorkflowInput",
    "run_local",
    "submit",
]


class InterruptedRuns(UserWarning):
    """A local session found interrupted runs in its store and leaves them alone; the
    message names them, with the commands that go on with one or drop it."""


_REMOTE_BRIDGE: Bridge | None = None
_REMOTE_LOCK = threading.Lock()


def _remote_bridge() -> Bridge:
    """The event loop of the runs of services, one for the process (made when first
    needed; its thread is a daemon)."""
    global _REMOTE_BRIDGE  # one loop per process, made on first use
    with _REMOTE_LOCK:
        if _REMOTE_BRIDGE is None or _REMOTE_BRIDGE.closed:
            _REMOTE_BRIDGE = Bridge("simrun-api-remote")
        return _REMOTE_BRIDGE


def submit(
    workflow: WorkflowInput,
    *,
    url: str | None = None,
    token: str | None = None,
    base: str | os.PathLike[str] | None = None,
    plugins: Sequence[str] = (),
    reuse: bool = True,
    rerun: Sequence[str] = (),
) -> Run:
    """Send ``workflow`` and its sources to the service at ``url`` (default ``SIMRUN_URL``)
    with ``token`` (default ``SIMRUN_TOKEN``), as ``simrun submit`` does; ``reuse`` and
    ``rerun`` as ``--no-reuse`` and ``--rerun``. The `Run`; `WorkflowError` when the
    workflow cannot run (here or as the service says), `ClientError` when unreachable."""
    prepared, _ = prepare_to_send(workflow, plugins, base=base)
    client = Client(
        url or os.environ.get(ENV_URL) or DEFAULT_URL,
        token if token is not None else os.environ.get(ENV_TOKEN),
    )
    try:
        run_id = client.submit(prepared.text, prepared.sources(), reuse=reuse, rerun=rerun)
    except Rejected as exc:
        client.close()
        raise WorkflowError(exc.problems, prepared.source) from exc
    except BaseException:
        client.close()
        raise
    return Run(run_id, remote(client), _remote_bridge())


class LocalSession:
    """What ``simrun run`` starts on this machine (a lock on ``store``, Redis, the service,
    ``workers`` containers of ``processes`` processes and ``memory_gb`` GiB each) for the
    ``with`` block. A run not ended stays, to go on with ``resume=RUN``; other interrupted
    runs are left alone (`InterruptedRuns`, `held`). `LocalError` when it cannot start."""

    def __init__(
        self,
        store: str | os.PathLike[str] | None = None,
        *,
        workers: int = 1,
        processes: int | None = None,
        memory_gb: float | None = None,
        plugins: Sequence[str] = (),
        redis_url: str | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        resume: str | None = None,
    ) -> None:
        # The API is an entry point, as the command line is: it reads the environment here.
        store = store if store is not None else os.environ.get(ENV_STORE) or DEFAULT_STORE
        self.store = Path(store).resolve()
        self.resume = resume
        self.workers = workers
        self.processes = processes
        self.memory_gb = memory_gb
        self.plugins = tuple(plugins)
        self.redis_url = redis_url
        self.grace_s = grace_s
        self._types: dict[str, TaskType] | None = None
        self._bridge: Bridge | None = None
        self._session: EmbeddedSession | None = None

    @property
    def types(self) -> dict[str, TaskType]:
        """The task types the session's service and workers know."""
        if self._types is None:
            self._types = load_types_from_here(self.plugins)
        return self._types

    @property
    def held(self) -> tuple[str, ...]:
        """The interrupted runs of the store the started session leaves alone, the latest
        first (``resume`` is never one)."""
        return self._session.held if self._session is not None else ()

    @property
    def url(self) -> str:
        """The URL of the session's service (for `simrun.submit`, ``simrun status``)."""
        return self._started()[0].url

    def _started(self) -> tuple[EmbeddedSession, Bridge]:
        if self._session is None or self._bridge is None:
            raise LocalError("the session is not started: use it in a `with` block")
        return self._session, self._bridge

    def start(self, *, workflow: Prepared | None = None) -> LocalSession:
        """Start Redis, the service and the workers (`start` of a started session does
        nothing); with ``workflow``, workers for the images its tasks run in too."""
        if self._session is not None:
            return self
        from simrun.local.session import EmbeddedSession
        from simrun.local.settings import LocalOptions
        from simrun.local.start import held_line, ready_session

        settings = LocalOptions(
            self.store,
            redis_url=self.redis_url,
            workers=self.workers,
            processes=self.processes,
            memory_gb=self.memory_gb,
            plugins=self.plugins,
            grace_s=self.grace_s,
            go_on_with=self.resume,
        )
        bridge = Bridge()
        try:
            options, _ = bridge.call(ready_session(settings, self.types, prepared=workflow))
            session = EmbeddedSession(options, self.types)
            try:
                bridge.call(session.start())
            except BaseException:
                bridge.call(session.stop())
                raise
        except BaseException:
            bridge.close()
            raise
        self._bridge, self._session = bridge, session
        note = held_line(session.held, self.store, self.plugins)
        if note is not None:
            warnings.warn(note, InterruptedRuns, stacklevel=3)
        return self

    def stop(self) -> None:
        """Stop the workers (running units finish within the grace period or are handed
        back; Ctrl-C meanwhile hands them back at once), then the service and Redis, and
        release the store. Safe to call twice."""
        bridge, session = self._bridge, self._session
        self._bridge = self._session = None
        if bridge is None or session is None:
            return
        stopping = bridge.submit(session.stop())
        try:
            while True:
                try:
                    stopping.result()
                    break
                except KeyboardInterrupt:  # Ctrl-C while stopping, as in `simrun run`:
                    session.hurry()  # running units are handed back now, not after the grace
        finally:
            bridge.close()

    def __enter__(self) -> LocalSession:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def prepare(
        self, workflow: WorkflowInput, *, base: str | os.PathLike[str] | None = None
    ) -> Prepared:
        """``workflow`` read, planned and checked against the session's task types
        (`WorkflowError` names every problem); nothing is started."""
        return prepare(workflow, self.types, base=base)

    def submit(
        self,
        workflow: WorkflowInput | Prepared,
        *,
        base: str | os.PathLike[str] | None = None,
        reuse: bool = True,
        rerun: Sequence[str] = (),
    ) -> Run:
        """Submit ``workflow`` to the session's service; the `Run`, to `Run.wait` for.
        ``reuse`` and ``rerun`` as `submit`'s."""
        prepared = workflow if isinstance(workflow, Prepared) else self.prepare(workflow, base=base)
        session, bridge = self._started()
        _check_images(prepared, self.types, session.options)
        run_id = bridge.call(
            session.controller.submit(
                prepared.doc,
                prepared.settings,
                prepared.text,
                base=prepared.base,
                reuse=reuse,
                rerun=rerun,
            )
        )
        return Run(run_id, session, bridge)

    def run(self, run_id: str | None = None) -> Run:
        """The `Run` of ``run_id`` of the session's store (default: the run ``resume``
        named), to `Run.wait` for; the session goes on with it only when it is ``resume``
        (an interrupted run it leaves alone stays as it is)."""
        run_id = run_id if run_id is not None else self.resume
        if run_id is None:
            raise LocalError("give the id of a run (or start the session with resume=RUN)")
        return Run(run_id, *self._started())


def _check_images(prepared: Prepared, types: dict[str, TaskType], options: LocalOptions) -> None:
    """`LocalError` naming the first task of ``prepared`` that the session of ``options``
    cannot run in its image (as `simrun run` refuses it before anything starts)."""
    from simrun.local.session import image_problem, unit_images
    from simrun.local.start import task_types_in

    tasks = task_types_in(prepared, types)
    problem = image_problem(tasks, options.engine, prepared.doc.image)
    if problem is not None:
        raise LocalError(problem)
    if prepared.doc.image is not None and prepared.doc.image not in options.images:
        raise LocalError(
            f"this session has no worker for the workflow's environment image "
            f"{prepared.doc.image!r}: run it with simrun.run_local(workflow), which starts "
            "one for it"
        )
    missing = sorted(set(unit_images(tasks, prepared.doc.image)) - set(options.unit_images))
    if missing:
        raise LocalError(
            f"the units of this workflow run in image {missing[0]!r} and this session has no "
            "worker inside it: run it with simrun.run_local(workflow), which starts one"
        )


def run_local(
    workflow: WorkflowInput | None = None,
    *,
    store: str | os.PathLike[str] | None = None,
    base: str | os.PathLike[str] | None = None,
    workers: int = 1,
    processes: int | None = None,
    memory_gb: float | None = None,
    plugins: Sequence[str] = (),
    progress: bool = True,
    timeout_s: float | None = None,
    reuse: bool = True,
    rerun: Sequence[str] = (),
    resume: str | None = None,
) -> RunResult:
    """Run ``workflow`` on this machine as ``simrun run`` does (a `LocalSession` for it) and
    return its last view; or with ``resume``, go on with that run of the store. The workflow
    is checked before anything starts; `RunTimeout` after ``timeout_s`` (the run kept)."""
    if (workflow is None) == (resume is None):
        raise TypeError("run_local needs a workflow to run, or resume=RUN to go on with one")
    session = LocalSession(
        store,
        workers=workers,
        processes=processes,
        memory_gb=memory_gb,
        plugins=plugins,
        resume=resume,
    )
    if workflow is None:
        with session:
            return session.run().wait(timeout_s, progress=progress)
    prepared = session.prepare(workflow, base=base)  # before anything starts
    session.start(workflow=prepared)  # its images get the workers they need
    with session:
        return session.submit(prepared, reuse=reuse, rerun=rerun).wait(timeout_s, progress=progress)
