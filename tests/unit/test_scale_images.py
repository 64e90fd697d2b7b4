"""The workers of a queue by name (`simrun.core.sizing.QueueName.worker`): the compose
service and the Kubernetes Deployment `simrun scale --apply` scales for it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simrun.cli.scale import Planned, ScaleError, apply_commands, compose_command, kubectl_command
from simrun.core.scaling import DEFAULT_SHAPE, QueueBacklog, desired_containers
from simrun.core.sizing import WORKER_NAME_MAX, QueueName, image_queue
from simrun.core.wire import PayloadError

#: A DNS-1123 label (RFC 1123), what Kubernetes takes as a Deployment's name.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def planned(*queues: str) -> list[Planned]:
    """The decision of an empty backlog for each queue."""
    out = []
    for q in queues:
        decision = desired_containers(QueueBacklog(q), DEFAULT_SHAPE)
        out.append(Planned(q, decision, DEFAULT_SHAPE, "given", 0, 0.0))
    return out


def test_three_images_of_one_slug_have_three_workers() -> None:
    """solver_2.1, solver-2.1 and Solver.2.1 are three queues, and their workers are three
    compose services and three Deployments (issue 22 defect 4: they were one)."""
    queues = [image_queue(i) for i in ("solver_2.1", "solver-2.1", "Solver.2.1")]
    assert len(set(queues)) == 3
    compose = apply_commands(planned(*queues), "compose", queues)[0]
    services = [arg.split("=")[0] for arg in compose if "=" in arg]
    kubernetes = apply_commands(planned(*queues), "kubernetes", queues)
    deployments = [argv[2] for argv in kubernetes]
    assert len(set(services)) == 3, compose
    assert len(set(deployments)) == 3, deployments


@pytest.mark.parametrize(
    ("queue", "name"),
    [
        ("cpu", "cpu"),
        ("gpu", "gpu"),
        ("image:solver", "image-solver"),
        ("image:solver-2-1", "image-solver-2-1"),
        ("image:Solver_2.1", "image-solver-2-1--"),
        ("image:solver--2", "image-solver-2--"),
        (image_queue("ghcr.io/org/solver:1.0"), "image-ghcr-io-org-solver-1-0-"),
    ],
)
def test_worker_names_are_valid_compose_and_kubernetes_names(queue: str, name: str) -> None:
    """cpu and gpu keep their names; an image queue becomes image-<name> when its name is a
    lower-case label already, else image-<lower-case slug>--<digest>: only letters, digits
    and dashes (a DNS label Kubernetes takes, a compose service name)."""
    got = QueueName(queue).worker
    assert got.startswith(name)
    assert got == name or "--" in got
    assert DNS_LABEL.fullmatch(QueueName(queue).deployment)


@given(st.lists(st.text(min_size=1, max_size=90), min_size=2, max_size=6, unique=True))
def test_worker_names_are_labels_distinct_and_stable(images: list[str]) -> None:
    """Whatever the images, the names of their queues' workers are DNS-1123 labels (the
    Deployment's too, at most 63 characters), one per queue, the same every time."""
    queues = {image_queue(i) for i in images if i.strip()}
    names = {q.worker for q in queues}
    assert len(names) == len(queues)
    for q in queues:
        assert len(q.worker) <= WORKER_NAME_MAX
        assert DNS_LABEL.fullmatch(q.deployment)
        assert DNS_LABEL.fullmatch(q.compose_service)
        assert QueueName(str(q)).worker == q.worker


@pytest.mark.parametrize("bad", ["tpu", "image:", "image:a/b", "", "Cpu"])
def test_a_queue_name_is_cpu_gpu_or_an_image_queue(bad: str) -> None:
    """A name read back from text is checked: anything but cpu, gpu or image:<safe name>
    is refused naming it."""
    with pytest.raises(PayloadError, match="is not cpu, gpu or image"):
        QueueName(bad)


def test_compose_scales_the_image_workers_service() -> None:
    """An image queue scales its compose service worker-image-<name>, beside cpu's."""
    argv = compose_command({QueueName("cpu"): 2, QueueName("image:solver"): 3}, None)
    assert argv == [
        "docker", "compose", "up", "-d", "--scale", "worker-cpu=2",
        "--scale", "worker-image-solver=3", "--no-recreate",
    ]  # fmt: skip


def test_kubernetes_scales_the_image_workers_deployment() -> None:
    """An image queue's Deployment is simrun-worker-image-<name>."""
    assert kubectl_command(QueueName("image:solver").deployment, 2) == [
        "kubectl", "scale", "deployment/simrun-worker-image-solver", "--replicas=2"
    ]  # fmt: skip


def test_a_queue_that_is_none_has_no_workers_to_scale() -> None:
    """Applying to a name that is no queue is one `ScaleError` naming it."""
    with pytest.raises(ScaleError, match=r"'tpu' is not cpu, gpu or image.*no docker compose"):
        apply_commands(planned("tpu"), "compose", ["tpu"])
