"""The /metrics text (simrun.service.metrics): the pure rules from facts to numbers and from
numbers to the text exposition format 0.0.4, read back with the Prometheus client's parser
(which raises on text it cannot read)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from simrun.core.reports import WorkerInfo
from simrun.core.scaling import (
    DEFAULT_SHAPE,
    BacklogEntry,
    ContainerShape,
    QueueBacklog,
    parse_backlog,
)
from simrun.service.metrics import (
    QUEUE_GAUGES,
    LiveWorkers,
    Metrics,
    ReportLag,
    UnitTotals,
    backlog_document,
    pools_of,
    queue_metrics,
    render,
    shape_of,
)
from tests.support.heartbeats import worker_info

Key = tuple[str, tuple[tuple[str, str], ...]]


def parse(text: str) -> tuple[dict[Key, float], dict[str, tuple[str, str]]]:
    """Samples by (name, sorted labels), and each family's (type, help)."""
    samples: dict[Key, float] = {}
    kinds: dict[str, tuple[str, str]] = {}
    for family in text_string_to_metric_families(text):
        kinds[family.name] = (family.type, family.documentation)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, kinds


def q(name: str, queue: str = "cpu") -> Key:
    return (name, (("queue", queue),))


def worker(
    wid: str,
    memory_gb: float = 8.0,
    processes: int = 4,
    *,
    queues: tuple[str, ...] = ("cpu",),
    gpus: int = 0,
    stopping: bool = False,
) -> WorkerInfo:
    return worker_info(
        wid, memory_gb=memory_gb, processes=processes, free_memory_gb=memory_gb / 2,
        free_processes=processes - 1, queues=queues, gpus=gpus, stopping=stopping,
    )  # fmt: skip


@dataclass(frozen=True)
class Case:
    """Facts in, the samples that must come out (others may come too)."""

    name: str
    backlogs: dict[str, QueueBacklog] = field(default_factory=dict)
    workers: tuple[WorkerInfo, ...] = ()
    units: dict[str, UnitTotals] = field(default_factory=dict)
    running_runs: int = 0
    redis_up: bool = True
    lag: ReportLag | None = None
    expect: dict[Key, float] = field(default_factory=dict)
    absent: tuple[str, ...] = ()


CASES = [
    Case(
        "nothing at all: a cpu series of zeros, so a query for cpu never comes back empty",
        lag=ReportLag(0, 0, 0.0),
        expect={
            q("simrun_backlog_units"): 0,
            q("simrun_backlog_seconds"): 0,
            q("simrun_desired_workers"): 0,
            q("simrun_desired_workers_processes"): DEFAULT_SHAPE.processes,
            q("simrun_desired_workers_memory_gib"): DEFAULT_SHAPE.memory_gb,
            q("simrun_workers"): 0,
            ("simrun_running_runs", ()): 0,
            ("simrun_redis_up", ()): 1,
            ("simrun_report_stream_entries", ()): 0,
            ("simrun_report_oldest_age_seconds", ()): 0,
        },
    ),
    Case(
        "unknown units take the default 60 s: 100 x 60 s / 600 s / 4 processes = 2.5 -> 3",
        backlogs={"cpu": QueueBacklog("cpu", (BacklogEntry("k", 100, None, 1.0),))},
        running_runs=2,
        expect={
            q("simrun_backlog_units"): 100,
            q("simrun_backlog_seconds"): 6000,
            q("simrun_desired_workers"): 3,
            ("simrun_running_runs", ()): 2,
        },
    ),
    Case(
        "learned fast units want few workers: 1000 x 0.5 s -> 1",
        backlogs={"cpu": QueueBacklog("cpu", (BacklogEntry("k", 1000, 0.5, 1.0),))},
        expect={q("simrun_backlog_seconds"): 500, q("simrun_desired_workers"): 1},
    ),
    Case(
        "the live workers' shape decides: 2 processes of 4 GiB, units of 4 GiB fit one at a "
        "time: 40 x 60 s / 600 s = 4 containers",
        backlogs={"cpu": QueueBacklog("cpu", (BacklogEntry("big", 40, 60.0, 4.0),))},
        workers=(worker("a", 4.0, 2), worker("b", 4.0, 2)),
        expect={
            q("simrun_desired_workers"): 4,
            q("simrun_desired_workers_processes"): 2,
            q("simrun_workers"): 2,
            q("simrun_worker_memory_gib"): 8.0,
            q("simrun_worker_free_memory_gib"): 4.0,
            q("simrun_worker_processes"): 4,
            q("simrun_worker_free_processes"): 2,
        },
    ),
    Case(
        "a gpu queue shows beside cpu, with its GPUs and stopping workers",
        backlogs={"gpu": QueueBacklog("gpu", (BacklogEntry("g", 3, 600.0, 2.0),))},
        workers=(
            worker("g1", 16.0, 2, queues=("gpu",), gpus=1),
            worker("g2", 16.0, 2, queues=("gpu",), gpus=1, stopping=True),
        ),
        expect={
            q("simrun_backlog_units", "gpu"): 3,
            q("simrun_worker_gpus", "gpu"): 2,
            q("simrun_workers", "gpu"): 2,
            q("simrun_workers_stopping", "gpu"): 1,
            q("simrun_desired_workers", "gpu"): 2,
            q("simrun_backlog_units"): 0,
        },
    ),
    Case(
        "unit totals per queue; an image queue's name is a label value like any other",
        units={"cpu": UnitTotals(5, 2, 1), "image:solver-1.2": UnitTotals(7, 0, 0)},
        expect={
            q("simrun_units_done"): 5,
            q("simrun_units_failed"): 2,
            q("simrun_units_killed_for_memory"): 1,
            q("simrun_units_done", "image:solver-1.2"): 7,
        },
    ),
    Case(
        "Redis down: redis_up 0, no lag families, the store's backlog still given",
        backlogs={"cpu": QueueBacklog("cpu", (BacklogEntry("k", 8, 60.0, 1.0),))},
        redis_up=False,
        expect={("simrun_redis_up", ()): 0, q("simrun_backlog_units"): 8},
        absent=("simrun_report_stream_entries", "simrun_report_oldest_age_seconds"),
    ),
    Case(
        "the report lag as given",
        lag=ReportLag(entries=12, pending=3, oldest_age_s=4.25),
        expect={
            ("simrun_report_stream_entries", ()): 12,
            ("simrun_report_stream_pending", ()): 3,
            ("simrun_report_oldest_age_seconds", ()): 4.25,
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_render_gives_the_expected_samples(case: Case) -> None:
    """The rendered facts parse, every family is a gauge with a help text, and the samples
    are those the rules give (backlog seconds, desired workers, capacity, totals, lag)."""
    metrics = Metrics(
        queues=queue_metrics(case.backlogs, pools_of(list(case.workers)), case.units),
        running_runs=case.running_runs,
        redis_up=case.redis_up,
        lag=case.lag,
    )
    text = render(metrics)
    samples, kinds = parse(text)
    for key, value in case.expect.items():
        assert key in samples, (key, text)
        assert samples[key] == pytest.approx(value), key
    for name in case.absent:
        assert name not in kinds
    assert all(kind == "gauge" and doc for kind, doc in kinds.values())
    assert text.endswith("\n")
    for name in kinds:
        assert f"# HELP {name} " in text
        assert f"# TYPE {name} gauge\n" in text


WEIRD = ['a"b', "back\\slash", "new\nline", "ünïcode", "", "image:x_y-1.2"]


@pytest.mark.parametrize("value", WEIRD)
def test_label_values_are_escaped(value: str) -> None:
    """Quotes, backslashes and new lines in a queue's name (a label value) are escaped so
    that the parser reads back exactly the value given."""
    metrics = Metrics(queues=queue_metrics({}, {}, {value: UnitTotals(done=1)}))
    samples, _ = parse(render(metrics))
    assert samples[("simrun_units_done", (("queue", value),))] == 1.0


@pytest.mark.parametrize(
    ("value", "check"),
    [
        (float("nan"), math.isnan),
        (float("inf"), lambda v: v == math.inf),
        (float("-inf"), lambda v: v == -math.inf),
        (1e-7, lambda v: v == 1e-7),
        (123456789, lambda v: v == 123456789),
        (True, lambda v: v == 1),
    ],
)
def test_special_values(value: float, check: Callable[[float], bool]) -> None:
    """NaN, infinities, tiny floats, big integers and booleans are written as the format
    spells them."""
    metrics = Metrics(queues=(), lag=ReportLag(0, 0, value))
    samples, _ = parse(render(metrics))
    assert check(samples[("simrun_report_oldest_age_seconds", ())])


#: A metric name and a label name of the text format 0.0.4.
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def test_every_family_has_a_classic_name_once_and_its_help_as_declared() -> None:
    """Every family of /metrics has a name and labels the format 0.0.4 allows (none
    reserved), none given twice, one HELP line each, read back as declared."""
    metrics = Metrics(queues=queue_metrics({}, {}, {}), lag=ReportLag(0, 0, 0.0))
    text = render(metrics)
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")]
    assert len(names) == len(set(names)) == len(QUEUE_GAUGES) + 5
    assert all(METRIC_NAME.fullmatch(name) for name in names)
    _, kinds = parse(text)
    for name, help_text, _ in QUEUE_GAUGES:
        assert kinds[name] == ("gauge", help_text)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert all(LABEL_NAME.fullmatch(k) and not k.startswith("__") for k in sample.labels)


def test_the_most_common_shape_of_workers_not_stopping_is_the_queue_shape() -> None:
    """The queue's shape is that of most of its live workers not stopping (ties: the bigger
    one); with none (or only stopping ones) there is none."""
    assert shape_of([worker("a", 8, 4), worker("b", 8, 4), worker("c", 32, 8)]) == (
        ContainerShape(8.0, 4)
    )
    assert shape_of([worker("a", 8, 4), worker("c", 32, 8)]) == ContainerShape(32.0, 8)
    assert shape_of([worker("a", 8, 4, stopping=True)]) is None
    assert shape_of([]) is None


def test_a_worker_of_two_queues_counts_in_both() -> None:
    """Pools are per queue served; a worker serving cpu and gpu is in both pools."""
    pools = pools_of([worker("a", queues=("cpu", "gpu"), gpus=1), worker("b")])
    assert pools["cpu"].workers == 2
    assert pools["gpu"].workers == 1
    assert pools["gpu"].gpus == 1


def test_backlog_document_lists_every_queue_with_its_shape() -> None:
    """/backlog's JSON: cpu always, each queue's entries as given, the live workers' count
    and shape (None while none is live), and the service's default worker shape; it reads
    back as the `BacklogView` it was made of."""
    doc = backlog_document(
        {"gpu": QueueBacklog("gpu", (BacklogEntry("g", 2, 5.0, 3.0),))},
        {"gpu": LiveWorkers(workers=1, shape=ContainerShape(24.0, 2))},
        ContainerShape(6.0, 3),
    )
    assert json.loads(json.dumps(doc)) == {
        "queues": [
            {"queue": "cpu", "units": 0, "entries": [], "workers": 0, "shape": None},
            {
                "queue": "gpu",
                "units": 2,
                "entries": [
                    {"key": "g", "units": 2, "seconds_per_unit": 5.0, "memory_per_worker_gb": 3.0}
                ],
                "workers": 1,
                "shape": {"memory_gb": 24.0, "processes": 2},
            },
        ],
        "default_shape": {"memory_gb": 6.0, "processes": 3},
    }
    assert parse_backlog(doc) == parse_backlog(json.loads(json.dumps(doc)))
    assert parse_backlog(doc).queues[1].backlog == QueueBacklog(
        "gpu", (BacklogEntry("g", 2, 5.0, 3.0),)
    )
