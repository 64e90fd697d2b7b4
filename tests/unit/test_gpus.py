"""GPUs on one machine and their memory (`simrun.local.machine.gpu_shares`,
`simrun.worker.gpumem`, `WorkerReport.peak_gpu_memory_gb`): pure, no nvidia-smi runs."""

from __future__ import annotations

import pytest

from simrun.core.reports import WorkerReport
from simrun.local.machine import gpu_shares
from simrun.worker.gpumem import parse_memory_used, query_argv


@pytest.mark.parametrize(
    ("ids", "workers", "shares"),
    [
        ((), 2, ((), ())),
        (("0", "1"), 1, (("0", "1"),)),
        (("0", "1", "2"), 2, (("0", "2"), ("1",))),
        (("0",), 3, (("0",), (), ())),
        (("GPU-a", "GPU-b"), 2, (("GPU-a",), ("GPU-b",))),
    ],
)
def test_the_machines_gpus_are_dealt_so_no_two_workers_share_one(
    ids: tuple[str, ...], workers: int, shares: tuple[tuple[str, ...], ...]
) -> None:
    """Every GPU goes to exactly one worker container, in turn; a worker may get none."""
    assert gpu_shares(ids, workers) == shares


def test_nvidia_smi_is_asked_for_the_memory_used_of_the_granted_devices() -> None:
    """One query names the devices, without header nor units."""
    assert query_argv("/bin/nvidia-smi", ("0", "3")) == [
        "/bin/nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits",
        "-i", "0,3",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "used"),
    [
        ("0, 512\n1, 1024\n", {"0": 0.5, "1": 1.0}),
        ("0, [N/A]\n1, 256\n", {"1": 0.25}),
        ("No devices were found\n", {}),
        ("", {}),
    ],
)
def test_memory_used_is_read_in_gib_and_unreadable_lines_are_skipped(
    text: str, used: dict[str, float]
) -> None:
    """MiB become GiB; a device nvidia-smi cannot measure ([N/A]) is left out."""
    assert parse_memory_used(text) == used


def test_a_report_carries_the_gpu_memory_next_to_the_host_memory() -> None:
    """The GPU peak goes over the wire beside the host peaks; an older report without it
    reads as unknown."""
    report = WorkerReport(
        peak_memory_gb=(1.5,), seconds_per_unit=2.0, units=1, limit_gb=4.0,
        peak_gpu_memory_gb=0.75,
    )  # fmt: skip
    assert WorkerReport.from_dict(report.to_dict()) == report
    old = {k: v for k, v in report.to_dict().items() if k != "peak_gpu_memory_gb"}
    assert WorkerReport.from_dict(old).peak_gpu_memory_gb is None
