"""`simrun scale --apply` for the queue of a task image: the compose service and the
Kubernetes Deployment its workers are, by name (`simrun.cli.scale.worker_name`)."""

from __future__ import annotations

import pytest

from simrun.cli.scale import compose_command, kubectl_command, worker_name
from simrun.core.sizing import image_queue


@pytest.mark.parametrize(
    ("queue", "name"),
    [
        ("cpu", "cpu"),
        ("gpu", "gpu"),
        ("image:solver", "image-solver"),
        ("image:Solver_2.1", "image-solver-2-1"),
        (image_queue("ghcr.io/org/solver:1.0"), "image-ghcr-io-org-solver-1-0-"),
    ],
)
def test_worker_names_are_valid_compose_and_kubernetes_names(queue: str, name: str) -> None:
    """cpu and gpu keep their names; an image queue becomes image-<lower-case slug>, only
    letters, digits and dashes (a DNS label Kubernetes takes, a compose service name)."""
    got = worker_name(queue)
    assert got.startswith(name)
    assert got.replace("-", "").isalnum()
    assert got == got.lower()


def test_compose_scales_the_image_workers_service() -> None:
    """An image queue scales its compose service worker-image-<name>, beside cpu's."""
    argv = compose_command({"cpu": 2, "image:solver": 3}, None)
    assert argv == [
        "docker", "compose", "up", "-d", "--scale", "worker-cpu=2",
        "--scale", "worker-image-solver=3", "--no-recreate",
    ]  # fmt: skip


def test_kubernetes_scales_the_image_workers_deployment() -> None:
    """An image queue's Deployment is simrun-worker-image-<name>."""
    name = worker_name("image:solver")
    assert kubectl_command(f"simrun-worker-{name}", 2) == [
        "kubectl", "scale", "deployment/simrun-worker-image-solver", "--replicas=2"
    ]  # fmt: skip
