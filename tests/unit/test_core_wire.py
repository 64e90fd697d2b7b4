"""The wire formats of simrun.core (job ids, the job payload, report entries, heartbeats,
the serializer) and the Redis names of simrun.queues.keys, without Redis."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import msgpack
import pytest

from simrun.core.jobs import JobPaths, JobResources, JobSpec, queue_for
from simrun.core.reports import ReportEntry, RunningJob, WorkerInfo, WorkerReport
from simrun.core.sizing import image_queue
from simrun.core.wire import PayloadError, deserialize, job_id, serialize
from simrun.plugins import TaskPaths
from simrun.queues.keys import Keys
from tests.support.heartbeats import worker_info
from tests.support.keys import TEST_KEY


def _spec(**changes: Any) -> JobSpec:
    paths = TaskPaths.for_task(Path("/store"), "run1", "sweep", inputs={"plate": Path("/p")})
    fields: dict[str, Any] = {
        "kind": "chunk",
        "run": "run1",
        "task": "sweep",
        "task_type": "heat",
        "settings": {"grid": 16},
        "paths": JobPaths.of(paths),
        "resources": JobResources(
            memory_base_gb=0.5, memory_per_worker_gb=1.0, seconds_per_unit=0.25
        ),
        "attempt": 2,
        "indices": (4, 5, 6),
        "timeout_s": 30.0,
    }
    fields.update(changes)
    return JobSpec(**fields)


def test_keys_all_derive_from_the_prefix() -> None:
    """Every key and queue name of a namespace starts with its prefix, so namespaces never
    share a key (arq's global job keys included, through the arq job id)."""
    keys = Keys("ns1")
    names = [
        keys.queue("cpu"),
        keys.queue("gpu"),
        keys.queue(image_queue("solver")),
        keys.reports,
        keys.worker("w1"),
        keys.workers,
        keys.attempts("run1", "sweep"),
        keys.arq_job_id("run1:sweep:0:1"),
    ]
    assert all(name.startswith("ns1:") for name in names)
    assert len(set(names)) == len(names)
    assert keys.job_id_from_arq(keys.arq_job_id("a:b:0:1")) == "a:b:0:1"
    with pytest.raises(PayloadError, match="not cpu, gpu or image"):
        keys.queue("fast")
    with pytest.raises(PayloadError, match="prefix"):
        Keys("has space")


@pytest.mark.parametrize(
    ("prefix", "pattern"),
    [
        ("simrun", "simrun:attempts:*"),
        ("simrun-local-0a1b2c3d4e", "simrun-local-0a1b2c3d4e:attempts:*"),
        ("a*b?[c]\\d", "a\\*b\\?\\[c\\]\\\\d:attempts:*"),  # glob characters escaped
    ],
)
def test_attempts_pattern_matches_the_namespace_only(prefix: str, pattern: str) -> None:
    """The SCAN pattern of a namespace's attempts hashes escapes the prefix, and a hash's
    name gives back its run and task (run ids hold no colon; task names may); a name
    whose run is not shaped like a run id is not ours (another namespace's)."""
    keys = Keys(prefix)
    assert keys.attempts_pattern == pattern
    assert keys.split_attempts(keys.attempts("20250101-120000-1a2b3c", "a:b")) == (
        "20250101-120000-1a2b3c",
        "a:b",
    )
    for bad in (
        f"{prefix}:attempts:20250101-120000-1a2b3c",  # no task
        f"{prefix}:attempts:attempts:20250101-120000-1a2b3c:t",  # namespace <prefix>:attempts
        f"{prefix}:queue:cpu",
        "other:attempts:20250101-120000-1a2b3c:t",
    ):
        with pytest.raises(PayloadError, match="not an attempts hash"):
            keys.split_attempts(bad)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("solver", "image:solver"),
        ("solver-2.1_x", "image:solver-2.1_x"),
    ],
)
def test_safe_image_names_are_kept(image: str, expected: str) -> None:
    """An image name of safe characters names its queue as it is."""
    assert image_queue(image) == expected


def test_unsafe_image_names_are_sanitized_without_collisions() -> None:
    """Registry paths lose their '/' and ':' but keep a hash of the original, so that two
    names that sanitize alike still get different queues."""
    a = image_queue("ghcr.io/org/solver:1.0")
    b = image_queue("ghcr.io/org/solver_1.0")
    assert a.startswith("image:ghcr.io_org_solver_1.0-")
    assert a != b
    assert all(c.isalnum() or c in ":._-" for c in a)


@pytest.mark.parametrize(
    ("kind", "indices", "expected"),
    [
        ("chunk", [7, 8, 9], "run1:sweep:7:3"),
        ("merge", [], "run1:sweep:merge:3"),
        ("command", [], "run1:sweep:command:3"),
    ],
)
def test_job_ids_are_deterministic(kind: Any, indices: list[int], expected: str) -> None:
    """A job id is run:task:first index:attempt (merge/command instead of an index)."""
    assert job_id("run1", "sweep", kind, indices, 3) == expected


def test_queue_of_a_job() -> None:
    """A job with an image goes to its image queue, else gpu when it needs GPUs, else cpu."""
    assert queue_for(_spec()) == "cpu"
    assert (
        queue_for(
            _spec(resources=JobResources(memory_base_gb=0.5, memory_per_worker_gb=1.0, gpus=1))
        )
        == "gpu"
    )
    assert queue_for(
        _spec(
            image="solver",
            resources=JobResources(memory_base_gb=0.5, memory_per_worker_gb=1.0, gpus=1),
        )
    ) == ("image:solver")


def test_job_spec_round_trips_through_msgpack() -> None:
    """to_dict → msgpack → from_dict gives the same job, with its id on the wire."""
    spec = _spec(uses_cores=True, checkpoints=True, image="img")
    data = deserialize(serialize(spec.to_dict()))
    assert data["job_id"] == "run1:sweep:4:2"
    assert JobSpec.from_dict(data) == spec
    assert JobSpec.from_dict(data).paths.task_paths() == spec.paths.task_paths()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "batch"}, "field 'kind' must be one of"),
        ({"run": ""}, "field 'run' must be a non-empty string"),
        ({"indices": [1, -2]}, "field 'indices' must be a list of integers >= 0"),
        ({"indices": [1, True]}, "field 'indices' must be a list of integers >= 0"),
        ({"attempt": 0}, "field 'attempt' must be an integer >= 1"),
        ({"settings": [1]}, "field 'settings' must be a map"),
        ({"timeout_s": -1}, "field 'timeout_s' must be a finite number >= 0"),
        ({"job_id": "other"}, "field 'job_id' is 'other' but"),
        ({"resources": {"memory_base_gb": 1}}, "resources: the field 'memory_per_worker_gb'"),
        (
            {"resources": {"memory_base_gb": 1, "memory_per_worker_gb": float("nan")}},
            "'memory_per_worker_gb' must be a finite number",
        ),
        ({"paths": {"store": "/s"}}, "paths: the field 'inputs' is missing"),
        ({"uses_cores": "yes"}, "field 'uses_cores' must be true or false"),
        ({"indices": []}, "a chunk job needs at least one unit index"),
        ({"indices": [1, 1]}, "names a unit twice"),
        ({"kind": "merge", "indices": [0]}, "a merge job takes no unit indices"),
        ({"ranges": [[2, 1]]}, r"holds \[2, 1\]: each must be \[first, last\]"),
        ({"ranges": [[0, 3], [2, 5]]}, "ascending and apart"),
        ({"ranges": [[0, True]]}, "each must be"),
        ({"ranges": [[-1, 2]]}, "each must be"),
        ({"ranges": "0-3"}, "must be a list of"),
        ({"ranges": [[0, 2_000_000]]}, "names more than 1000000 units"),
        ({"ranges": [[0, 1]], "indices": [0, 1]}, "'ranges' and 'indices' both given"),
    ],
)
def test_bad_payload_fields_are_named(change: dict[str, Any], message: str) -> None:
    """A payload with a bad field is refused with an error naming that field."""
    data = {**_spec().to_dict(), **change}
    if "indices" in change and "ranges" not in change:
        data.pop("ranges")  # the payload of an older service: the indices one by one
    if "kind" in change or "indices" in change or "ranges" in change:
        data.pop("job_id")
    with pytest.raises(PayloadError, match=message):
        JobSpec.from_dict(data)


def test_a_payloads_command_is_no_part_of_the_job() -> None:
    """A command job carries no command: one a payload sends (an older service's, or a
    forger's) is ignored, the worker runs its installed type's template (issue 23)."""
    data = {**_spec().to_dict(), "kind": "command", "ranges": [], "command": "touch /x"}
    data.pop("job_id")
    spec = JobSpec.from_dict(data)
    assert "command" not in spec.model_dump()
    assert "command" not in spec.to_dict()


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ({"out": ""}, r"paths: field 'out' must be a non-empty path without NUL, got ''"),
        ({"scratch": "a\0b"}, r"paths: field 'scratch' must be a non-empty path without NUL"),
        (
            {"inputs": {"bad-port": "/x"}},
            r"paths: field 'inputs' must be an identifier \(an input port name\), "
            r"got 'bad-port' at inputs\[bad-port\]$",
        ),
        ({"inputs": {"plate": ""}}, r"field 'inputs' must be a non-empty path without NUL"),
    ],
)
def test_bad_paths_of_a_payload_are_named(paths: dict[str, Any], message: str) -> None:
    """A path of a job must be non-empty without NUL and an input port an identifier (the
    rules simrun-exec applies); the refusal names the field and the value."""
    data = _spec().to_dict()
    data["paths"] = {**data["paths"], **paths}
    with pytest.raises(PayloadError, match=message):
        JobSpec.from_dict(data)


def test_missing_field_is_named() -> None:
    """A payload without a required field says which one is missing."""
    data = _spec().to_dict()
    del data["task_type"]
    with pytest.raises(PayloadError, match="the field 'task_type' is missing"):
        JobSpec.from_dict(data)


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_are_refused_by_the_deserializer(protocol: int) -> None:
    """A pickle payload of any framed protocol is refused before it is unpickled."""
    payload = pickle.dumps({"f": "simrun_job", "a": ()}, protocol=protocol)
    with pytest.raises(PayloadError, match="refused a pickled payload"):
        deserialize(payload)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps({"a": 1}, protocol=0), "not msgpack"),
        (b"\xc1", "not msgpack"),
        (msgpack.packb([1, 2]), "a list, not a map"),
    ],
)
def test_other_non_msgpack_payloads_are_refused(payload: bytes, message: str) -> None:
    """Bytes that are not a msgpack map are refused with what they are."""
    with pytest.raises(PayloadError, match=message):
        deserialize(payload)


def _entry(**changes: Any) -> ReportEntry:
    fields: dict[str, Any] = {
        "job_id": "run1:sweep:4:2",
        "run": "run1",
        "task": "sweep",
        "kind": "chunk",
        "attempt": 2,
        "worker_id": "w1",
        "outcomes": {4: "done", 5: "failed", 6: "not_run"},
        "errors": {5: "Traceback ...\nValueError: x"},
        "report": WorkerReport(
            peak_memory_gb=(0.25,),
            seconds_per_unit=0.5,
            units=1,
            limit_gb=1.0,
            killed_for_memory=False,
        ),
        "started": 1700000000.125,
        "finished": 1700000001.5,
    }
    fields.update(changes)
    return ReportEntry(**fields)


def test_report_entry_round_trips_through_stream_fields() -> None:
    """to_fields gives string fields; from_fields (str or bytes, as Redis returns them)
    restores the entry, integer unit keys included."""
    entry = _entry()
    fields = entry.to_fields(TEST_KEY)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    assert ReportEntry.from_fields(fields, TEST_KEY) == entry
    as_bytes = {k.encode(): v.encode() for k, v in fields.items()}
    assert ReportEntry.from_fields(as_bytes, TEST_KEY) == entry
    merge = _entry(kind="merge", outcomes={"merge": "refused"}, errors={}, error="too big")
    assert ReportEntry.from_fields(merge.to_fields(TEST_KEY), TEST_KEY) == merge


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"outcomes": '{"4": "exploded"}'},
            r"'outcomes' must be one of .*, got 'exploded' at outcomes\[4\]",
        ),
        ({"kind": "batch"}, "field 'kind' must be one of .*, got 'batch'"),
        ({"report": "{}"}, "bad field"),
        ({"attempt": "two"}, "bad field"),
    ],
)
def test_bad_report_fields_are_named(change: dict[str, str], message: str) -> None:
    """An unreadable report entry says what is wrong with it."""
    fields = _signed({**_entry().to_fields(TEST_KEY), **change})
    with pytest.raises(PayloadError, match=message):
        ReportEntry.from_fields(fields, TEST_KEY)
    fields = _entry().to_fields(TEST_KEY)
    del fields["outcomes"]
    with pytest.raises(PayloadError, match="'outcomes' is missing"):
        ReportEntry.from_fields(_signed(fields), TEST_KEY)


def _signed(fields: dict[str, str]) -> dict[str, str]:
    """``fields`` signed again with the tests' key (as a worker would have)."""
    rest = {k: v for k, v in fields.items() if k != "sig"}
    return {**rest, "sig": TEST_KEY.sign_fields(rest)}


def _heartbeat(*running: RunningJob) -> WorkerInfo:
    return worker_info(
        "w1", queues=("cpu", "image:x"), processes=4, free_memory_gb=6.5, free_processes=3,
        running=running, pid=12, started=1.0, updated=2.0,
    )  # fmt: skip


def test_worker_info_round_trips_and_bad_text_is_refused() -> None:
    """A heartbeat is JSON that reads back to the same info; garbage is a PayloadError."""
    info = _heartbeat(RunningJob.of(_spec(), "running"))
    assert WorkerInfo.from_json(info.to_json()) == info
    with pytest.raises(PayloadError, match=r"^worker heartbeat cannot be read: "):
        WorkerInfo.from_json("{")
    with pytest.raises(PayloadError, match="heartbeat cannot be read: field 'id' must be"):
        WorkerInfo.from_json(json.dumps({**json.loads(info.to_json()), "id": 1}))


def test_running_jobs_round_trip_through_the_heartbeat() -> None:
    """A worker's running-job record names the job as its spec does (id, run, task, kind,
    indices, attempt) and its state; it reads back from the heartbeat JSON unchanged, a
    waiting job becomes running when admitted, and an unknown state is refused."""
    spec = _spec()
    waiting = RunningJob.of(spec)
    assert (waiting.job_id, waiting.run, waiting.task, waiting.kind) == (
        spec.job_id,
        "run1",
        "sweep",
        "chunk",
    )
    assert (waiting.indices, waiting.attempt, waiting.state) == ((4, 5, 6), 2, "waiting")
    running = waiting.admitted()
    assert running.state == "running"
    assert waiting.state == "waiting"
    merge = RunningJob.of(_spec(kind="merge", indices=()), "running")
    info = _heartbeat(waiting, running, merge)
    back = WorkerInfo.from_json(info.to_json())
    assert back == info
    assert all(isinstance(job, RunningJob) for job in back.running)
    assert json.loads(info.to_json())["running"][0] == {
        "job_id": "run1:sweep:4:2",
        "run": "run1",
        "task": "sweep",
        "kind": "chunk",
        "indices": [4, 5, 6],
        "attempt": 2,
        "state": "waiting",
    }
    bad = json.loads(info.to_json())
    bad["running"][0]["state"] = "sleeping"
    with pytest.raises(PayloadError, match=r"heartbeat.*'running'.*got 'sleeping'"):
        WorkerInfo.from_json(json.dumps(bad))


def test_chunk_indices_travel_as_ranges() -> None:
    """A chunk's indices go on the wire as inclusive ranges (a thousand contiguous units
    are one pair) and come back as the same indices; a payload that lists them one by
    one (an older service) reads the same."""
    spec = _spec().model_copy(update={"indices": (*range(0, 1000), 1500, 1502, 1503)})
    data = spec.to_dict()
    assert data["ranges"] == [[0, 999], [1500, 1500], [1502, 1503]]
    assert "indices" not in data
    assert JobSpec.from_dict(data) == spec
    older = {k: v for k, v in data.items() if k != "ranges"} | {"indices": list(spec.indices)}
    assert JobSpec.from_dict(older) == spec


def test_task_paths_have_one_wire_shape() -> None:
    """`JobPaths` is the one wire shape of `TaskPaths` (the job payload's and simrun-exec's
    job file's): a `TaskPaths` is taken as it, reads back whole, and a map with an unknown
    path field is refused."""
    paths = TaskPaths.for_task(Path("/store"), "r", "t", inputs={"b": Path("/b"), "a": Path("a")})
    wire = JobPaths.of(paths)
    assert list(wire.inputs) == ["a", "b"]
    assert wire.task_paths() == paths
    assert JobPaths.model_validate(wire.model_dump()) == wire
    assert wire.absolute().inputs["a"] == str(Path("a").absolute())
    data = _spec().to_dict()
    data["paths"] = {**wire.model_dump(), "extra": "/x"}
    with pytest.raises(PayloadError, match="paths: unknown field 'extra'"):
        JobSpec.from_dict(data)
