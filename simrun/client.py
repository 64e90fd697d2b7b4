"""Talking to a simrun service over HTTP (`Client`), and preparing a workflow before it is
sent (`plan_tasks`: the ``plan`` of each task type installed here)."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import quote

import httpx

from simrun.core.unitlogs import LiveAttempt, UnitLogHeader, UnitLogs
from simrun.core.views import (
    ErrorCode,
    FailureView,
    RunSummary,
    RunView,
    parse_error,
    parse_failures,
    parse_run,
    parse_runs,
)
from simrun.errors import SimrunError
from simrun.plugins import PluginError, TaskType, resolve

if TYPE_CHECKING:
    from simrun.workflow import Workflow, WorkflowError

# The workflow's models and YAML are imported when used: `simrun status` starts without.
#: The spec's name here; the rest of the module is the command line's and the API's client.
__all__ = ["plan_tasks"]

T = TypeVar("T")


class ClientError(SimrunError, RuntimeError):
    """The service could not be reached, or answered with an error (``code``: which; None
    without an answer of the service)."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class Rejected(ClientError):
    """The service refused a workflow for its ``problems``."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        from simrun.workflow import Problem

        self.problems = [
            Problem(
                tuple(e.get("loc") or ()), str(e.get("message", "")), e.get("line"), e.get("task")
            )
            for e in errors
        ]
        lines = "".join(f"\n  {p}" for p in self.problems)
        super().__init__(
            f"the service refused the workflow ({len(errors)} problems):{lines}", ErrorCode.REJECTED
        )


def plan_tasks(doc: Workflow, types: Mapping[str, TaskType]) -> Workflow:
    """``doc`` with the settings of every task whose type has a ``plan`` replaced by what
    it returns; `WorkflowError` names each task whose plan fails or returns bad settings."""
    from simrun.workflow import Problem, TaskSpec, WorkflowError

    tasks: list[TaskSpec] = []
    problems: list[Problem] = []
    for i, spec in enumerate(doc.tasks):
        task_type = types.get(spec.type)
        if task_type is None or task_type.plan is None:
            tasks.append(spec)
            continue
        where = ("tasks", i, "settings")
        try:
            parsed = task_type.settings.model_validate(spec.settings)
            planned = resolve(task_type.plan)(parsed)
            model = task_type.settings.model_validate(
                planned.model_dump() if hasattr(planned, "model_dump") else planned
            )
        except PluginError as exc:
            problems.append(Problem(where, f"cannot plan: {exc}", task=spec.name))
            continue
        except Exception as exc:  # noqa: BLE001  # plugin code may raise anything; name the task
            message = f"plan of {spec.type!r} failed: {type(exc).__name__}: {exc}"
            problems.append(Problem(where, message, task=spec.name))
            continue
        settings = json.loads(model.model_dump_json())
        tasks.append(spec.model_copy(update={"settings": settings}))
    if problems:
        raise WorkflowError(problems, "plan")
    return doc.model_copy(update={"tasks": tasks})


def submission_text(original: str, original_doc: Workflow, planned: Workflow) -> str:
    """The document as written when planning changed nothing, else the planned one as YAML."""
    import yaml

    if planned == original_doc:
        return original
    data = planned.model_dump(exclude_none=True, exclude_defaults=False)
    return yaml.safe_dump(data, sort_keys=False)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _refuse(name: str, message: str) -> WorkflowError:
    from simrun.workflow import Problem, WorkflowError

    return WorkflowError([Problem(("sources", name), message)], "sources")


def directory_files(name: str, root: Path) -> list[tuple[str, Path]]:
    """The files of the directory source ``name`` at ``root`` with their relative paths,
    sorted; `WorkflowError` for a link out of it or to a directory, or a non-regular file."""
    base = root.resolve()
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(base, followlinks=False):
        here = Path(folder)
        for entry in sorted([*dirs, *files]):
            path = here / entry
            rel = path.relative_to(base).as_posix()
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(base):
                    raise _refuse(name, f"{rel!r} is a symbolic link out of the directory")
                if target.is_dir():
                    raise _refuse(name, f"{rel!r} is a symbolic link to a directory")
                if not target.is_file():
                    raise _refuse(name, f"{rel!r} is a symbolic link to no regular file")
                found.append((rel, target))
            elif path.is_dir():
                continue  # os.walk goes into it
            elif stat.S_ISREG(path.lstat().st_mode):
                found.append((rel, path))
            else:
                raise _refuse(name, f"{rel!r} is not a regular file (a device, FIFO or socket)")
    return sorted(found)


def source_upload(name: str, path: Path) -> dict[str, Any]:
    """The upload of source ``name``: a file's content, or a directory's files; `WorkflowError`
    names a source that is neither or cannot be read."""
    try:
        if path.is_dir():
            files = directory_files(name, path)
            return {
                "filename": path.resolve().name,
                "files": [{"path": rel, "content_b64": _b64(f)} for rel, f in files],
            }
        if not path.is_file():
            raise _refuse(name, f"{path} is not a regular file or a directory")
        return {"filename": path.name, "content_b64": _b64(path)}
    except OSError as exc:
        raise _refuse(name, f"cannot read {path}: {exc}") from exc


class UnknownKey(ClientError):
    """The service has no observations of a resource key (or it is no key)."""


class NoSpace(ClientError):
    """A volume of the service is full (507): nothing of the request was kept; the line
    names the volume, where it is mounted and its free bytes."""


class StreamBroken(ClientError):
    """The event stream of a run could not be opened or broke off (connect again)."""


#: Seconds without a byte of an event stream (keep-alive every 15 s) before it is broken.
EVENTS_READ_TIMEOUT_S = 45.0
#: The codes of a thing that is not there, whose line `Client` shows alone.
ABSENT = frozenset({ErrorCode.UNKNOWN_RUN, ErrorCode.NOT_FOUND})


def refusal(method: str, path: str, response: httpx.Response) -> ClientError:
    """The error of an error answer, by its code (`Rejected`, `UnknownKey`, `NoSpace`, the
    line alone for `ABSENT`, else with the request and status)."""
    try:
        error = parse_error(response.json())
    except ValueError:
        return ClientError(f"{method} {path}: {response.status_code}: {response.text}")
    if error.code is ErrorCode.REJECTED and error.errors is not None:
        return Rejected(error.errors)
    if error.code is ErrorCode.UNKNOWN_KEY:
        return UnknownKey(error.detail, error.code)
    if error.code is ErrorCode.NO_SPACE:
        return NoSpace(f"the simrun service: {error.detail}", error.code)
    if error.code in ABSENT:
        return ClientError(error.detail, error.code)
    return ClientError(f"{method} {path}: {response.status_code}: {error.detail}", error.code)


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """The name and data of each server-sent event in ``lines``."""
    name, data = "", []
    async for line in lines:
        if line:
            field, _, value = line.partition(":")
            if field == "event":
                name = value.removeprefix(" ")
            elif field == "data":
                data.append(value.removeprefix(" "))
            continue  # a comment (": keep-alive") or a field this reads not
        if data:
            yield name, "\n".join(data)
        name, data = "", []


class Client:
    """A blocking client of the simrun HTTP API; `events` is the one asynchronous call."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers, timeout=timeout_s, verify=self._verify()
        )

    def _verify(self) -> bool:
        """Whether to load the CA bundle (slow at start-up): for HTTPS only (redirects are
        not followed, so no request leaves for another URL)."""
        return not self.url.startswith("http://")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ClientError(
                f"cannot reach the simrun service at {self.url} ({exc}); start one with "
                "`simrun service` or point SIMRUN_URL at it"
            ) from exc
        if response.status_code >= 400:
            raise refusal(method, path, response)
        return response.json()

    def submit(
        self,
        text: str,
        sources: Mapping[str, Path] | None = None,
        *,
        reuse: bool = True,
        rerun: Sequence[str] = (),
    ) -> str:
        """Send a workflow and its sources (read here); the id of the new run."""
        uploads = {name: source_upload(name, path) for name, path in (sources or {}).items()}
        body: dict[str, Any] = {"workflow": text, "sources": uploads}
        if not reuse:
            body["reuse"] = False
        if rerun:
            body["rerun"] = list(rerun)
        result = self._call("POST", "/runs", body)
        return str(result["run"])

    def _parsed(self, parse: Callable[[Any], T], method: str, path: str) -> T:
        """The answer of ``method path`` parsed by ``parse`` (`ClientError` when it fails)."""
        try:
            return parse(self._call(method, path))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ClientError(f"{method} {path}: the answer is not understood: {exc}") from exc

    def runs(self, limit: int = 50) -> list[RunSummary]:
        """The latest runs, the newest first."""
        return self._parsed(parse_runs, "GET", f"/runs?limit={limit}")

    def run(self, run_id: str) -> RunView:
        """One run with its tasks."""
        return self._parsed(parse_run, "GET", f"/runs/{run_id}")

    async def events(self, run_id: str) -> AsyncIterator[RunView]:
        """The views of one run as the service pushes them, until it ended; `StreamBroken`
        when the stream cannot be opened (5xx) or broke, `ClientError` when refused."""
        path = f"/runs/{run_id}/events"
        timeout = httpx.Timeout(self._timeout_s, read=EVENTS_READ_TIMEOUT_S)
        try:
            async with (
                httpx.AsyncClient(
                    base_url=self.url, headers=self._headers, timeout=timeout, verify=self._verify()
                ) as http,
                http.stream("GET", path, headers={"Accept": "text/event-stream"}) as response,
            ):
                if response.status_code != 200:
                    await response.aread()
                    error = refusal("GET", path, response)
                    raise StreamBroken(str(error)) if response.status_code >= 500 else error
                media = response.headers.get("content-type", "")
                if not media.startswith("text/event-stream"):
                    raise ClientError(f"GET {path}: the answer is no event stream ({media})")
                async for name, data in _events(response.aiter_lines()):
                    if name != "run":
                        continue
                    try:
                        view = parse_run(json.loads(data))
                    except ValueError as exc:
                        raise ClientError(f"GET {path}: an event is not understood: {exc}") from exc
                    yield view
        except httpx.HTTPError as exc:
            raise StreamBroken(f"GET {path}: {type(exc).__name__}: {exc}") from exc

    def failures(self, run_id: str) -> list[FailureView]:
        """The failed units of a run with their last tracebacks."""
        return self._parsed(parse_failures, "GET", f"/runs/{run_id}/failures")

    def run_logs(self, run_id: str, task: str | None = None) -> dict[str, list[UnitLogHeader]]:
        """Per task of a run, the last attempt of each unit with a log."""
        path = f"/runs/{quote(run_id, safe='')}/logs"
        if task is not None:
            path += f"?task={quote(task, safe='')}"

        def parse(data: Any) -> dict[str, list[UnitLogHeader]]:
            return {
                str(name): [UnitLogHeader.from_dict(h, f"GET {path}") for h in headers]
                for name, headers in data["tasks"].items()
            }

        return self._parsed(parse, "GET", path)

    def unit_logs(
        self, run_id: str, task: str, unit: int | str, attempt: int | None = None
    ) -> UnitLogs:
        """A unit's attempts with their headers and output."""
        path = f"/runs/{quote(run_id, safe='')}/logs/{quote(task, safe='')}/{unit}"
        if attempt is not None:
            path += f"?attempt={attempt}"
        return self._parsed(lambda data: UnitLogs.from_dict(data, f"GET {path}"), "GET", path)

    def unit_live_logs(
        self, run_id: str, task: str, unit: int | str, since: Mapping[str, int] | None = None
    ) -> list[LiveAttempt]:
        """What each attempt of a unit printed past the offsets ``since`` (by file name), and
        the header of each that ended."""
        path = f"/runs/{quote(run_id, safe='')}/logs/{quote(task, safe='')}/{unit}/live"
        query = "&".join(f"since={quote(f'{k}:{v}', safe='')}" for k, v in (since or {}).items())

        def parse(data: Any) -> list[LiveAttempt]:
            return [LiveAttempt.from_dict(a, f"GET {path}") for a in data["attempts"]]

        return self._parsed(parse, "GET", f"{path}?{query}" if query else path)

    def replay(
        self,
        run_id: str,
        task: str | None = None,
        units: list[int] | None = None,
        memory_gb: float | None = None,
    ) -> int:
        body = {"task": task, "units": units or [], "memory_gb": memory_gb}
        return int(self._call("POST", f"/runs/{run_id}/replay", body)["replayed"])

    def rerun(
        self, run_id: str, task: str, memory_gb: float | None = None
    ) -> tuple[list[str], int]:
        """Run ``task`` again, done units included, and the tasks reading it."""
        body: dict[str, Any] = {"task": task, "units": [], "memory_gb": memory_gb, "all": True}
        answer = self._call("POST", f"/runs/{run_id}/replay", body)
        return [str(t) for t in answer["tasks"]], int(answer["replayed"])

    def cancel(self, run_id: str) -> int:
        return int(self._call("POST", f"/runs/{run_id}/cancel")["in_flight"])

    def resources(self) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", self._call("GET", "/resources"))

    def resource_evidence(self, key: str) -> dict[str, Any]:
        """The evidence of one resource key; `UnknownKey` when it has no observations."""
        return cast("dict[str, Any]", self._call("GET", "/resources/" + quote(key, safe="/")))

    def backlog(self) -> dict[str, Any]:
        """The live backlog per queue (``{"queues": [...]}``)."""
        return cast("dict[str, Any]", self._call("GET", "/backlog"))

    def workers(self) -> dict[str, Any]:
        """The live workers and the queues (``{"workers": [...], "backlog": {...}}``)."""
        return cast("dict[str, Any]", self._call("GET", "/workers"))
