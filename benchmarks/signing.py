"""The cost of signing: microseconds per job and per report that the HMAC of the job key
adds, against the same payload's plain msgpack (what arq would do without the key).

    python benchmarks/signing.py [--rounds 7] [--n 20000]

A job is the payload of a 100-unit chunk with its paths and settings as the service sends
it; a report is the stream fields of a job of 100 units done. Each round times ``--n``
encodes and decodes of each case, the cases interleaved; the figures are min / median /
max over the rounds of microseconds per call.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from simrun.core.jobs import JobPaths, JobResources, JobSpec
from simrun.core.reports import ReportEntry, WorkerReport
from simrun.core.signing import JobCodec, JobKey
from simrun.core.wire import deserialize, serialize
from simrun.plugins import TaskPaths

KEY = JobKey.parse(b"k" * 64, "the benchmark")


def _job() -> dict[str, object]:
    paths = TaskPaths.for_task(Path("/store"), "20261202-120000-abcdef", "sweep", inputs={
        "plate": Path("/store/runs/20261202-120000-abcdef/sources/plate.json")
    })  # fmt: skip
    spec = JobSpec(
        kind="chunk", run="20261202-120000-abcdef", task="sweep", task_type="heat",
        settings={"grid": 64, "diffusivities": [0.1, 0.2, 0.3], "duration": 1.0},
        paths=JobPaths.of(paths), indices=tuple(range(100)),
        resources=JobResources(memory_base_gb=0.5, memory_per_worker_gb=0.25),
    )  # fmt: skip
    return {"t": 1, "f": "simrun_job", "a": [spec.to_dict()], "k": {}, "et": 1_700_000_000_000}


def _report() -> ReportEntry:
    return ReportEntry(
        job_id="20261202-120000-abcdef:sweep:0:1", run="20261202-120000-abcdef", task="sweep",
        kind="chunk", attempt=1, worker_id="host-1-abcdef",
        outcomes=dict.fromkeys(range(100), "done"),
        report=WorkerReport(peak_memory_gb=(0.21,), seconds_per_unit=0.01, units=100, limit_gb=1.0),
        started=1.0, finished=2.0,
    )  # fmt: skip


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - began) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    job, codec = _job(), JobCodec(KEY)
    plain_blob, signed_blob = serialize(job), codec.serialize(job)
    entry = _report()
    fields = entry.to_fields(KEY)
    cases: dict[str, Callable[[], object]] = {
        "job encode, msgpack": lambda: serialize(job),
        "job encode, signed": lambda: codec.serialize(job),
        "job decode, msgpack": lambda: deserialize(plain_blob),
        "job decode, signed": lambda: codec.deserialize(signed_blob),
        "report sign (fields)": lambda: KEY.sign_fields(fields),
        "report encode (to_fields, signed)": lambda: entry.to_fields(KEY),
        "report decode (from_fields, checked)": lambda: ReportEntry.from_fields(fields, KEY),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            times[name].append(_per_call_us(fn, args.n))
    print(f"job payload {len(plain_blob)} bytes (signed {len(signed_blob)}); report "
          f"{sum(len(k) + len(v) for k, v in fields.items())} bytes of fields")  # fmt: skip
    print(f"{args.rounds} rounds of {args.n:,} calls; µs per call, min / median / max")
    for name, values in times.items():
        print(f"  {name:38s} {min(values):7.2f} / {statistics.median(values):7.2f} / "
              f"{max(values):7.2f}")  # fmt: skip
    med = {name: statistics.median(v) for name, v in times.items()}
    enc = med["job encode, signed"] - med["job encode, msgpack"]
    dec = med["job decode, signed"] - med["job decode, msgpack"]
    print(f"signing adds {enc:.2f} µs to a job's encode and {dec:.2f} µs to its decode "
          f"(medians); a report's signature costs {med['report sign (fields)']:.2f} µs to make "
          "and as much to check")  # fmt: skip


if __name__ == "__main__":
    main()
