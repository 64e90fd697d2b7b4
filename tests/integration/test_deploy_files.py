"""What docker-compose.yml, .env.example, the worker Dockerfiles and deploy/kubernetes
promise, read with PyYAML (no Docker needed); worker and health-check command lines are
parsed by the real click commands."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import click
import pytest
import yaml

from simrun.cli.service import service as service_command
from simrun.cli.worker import worker
from simrun.core.timing import TTL_PER_INTERVAL
from simrun.worker.health import main as health_main
from tests.composefile import (
    COMPOSE,
    PASSWORD,
    VAR,
    MissingVariable,
    compose,
    compose_bytes,
    env_example,
    interpolate,
    kube_bytes,
    seconds,
    services,
)

ROOT = Path(__file__).resolve().parents[2]

KUBE = ROOT / "deploy" / "kubernetes"
DOCKERFILES = [ROOT / "workers" / "Dockerfile", ROOT / "workers" / "Dockerfile.gpu"]
WORKERS = ("worker-cpu", "worker-gpu")
GIB = 2**30
#: Seconds a stopping worker needs after --grace-s to kill its processes and report.
HAND_BACK_S = 10
#: The host port .env.example publishes the service on.
SERVICE_PORT = 8765


def worker_params(args: list[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The parameters `simrun worker` parses from ``args`` in the environment ``env`` (none
    by default), without running it."""
    with mock.patch.dict(os.environ, env or {}, clear=True):
        ctx = worker.make_context("worker", list(args))
    return dict(ctx.params)


def kube_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(KUBE.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return docs


def kube(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in kube_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} documents"
    return found[0]


INTERPOLATIONS = [
    ("${A}", {"A": "1"}, "1"),
    ("${A:-d}", {}, "d"),
    ("${A:-d}", {"A": ""}, "d"),
    ("${A-d}", {"A": ""}, ""),
    ("${A:-d}g", {"A": "12.5"}, "12.5g"),
    ("$$A and $${A}", {"A": "x"}, "$A and ${A}"),
    ("${A:?need A}", {"A": "v"}, "v"),
    ("${A}", {}, ""),
]


@pytest.mark.parametrize(("text", "env", "out"), INTERPOLATIONS)
def test_interpolate(text: str, env: dict[str, str], out: str) -> None:
    """The test's compose interpolation follows compose's rules for the forms used."""
    assert interpolate(text, env) == out


@pytest.mark.parametrize("env", [{}, {"A": ""}])
def test_interpolate_missing(env: dict[str, str]) -> None:
    """``${V:?message}`` fails, with its message, when V is unset or empty."""
    with pytest.raises(MissingVariable, match="need A"):
        interpolate("${A:?need A}", env)


# --- docker-compose.yml and .env.example ----------------------------------------------------


def test_redis_password_is_required_and_not_in_the_example() -> None:
    """.env.example leaves REDIS_PASSWORD empty, and the compose file refuses to resolve
    without one, naming the variable."""
    assert env_example()["REDIS_PASSWORD"] == ""
    with pytest.raises(MissingVariable, match="REDIS_PASSWORD"):
        compose(REDIS_PASSWORD="")


def test_env_example_lists_every_variable() -> None:
    """Every variable the compose file reads is documented in .env.example."""
    used = {m.group(1) for m in VAR.finditer(COMPOSE.read_text(encoding="utf-8")) if m.group(1)}
    assert used, "the compose file reads no variable"
    assert used <= set(env_example()), sorted(used - set(env_example()))


def _host_ip(port: Any) -> str:
    """The host address a compose port entry publishes on ("" for every interface)."""
    if isinstance(port, dict):
        return str(port.get("host_ip", ""))
    parts = str(port).split(":")
    return parts[0] if len(parts) == 3 else ""


def test_nothing_is_published_beyond_localhost() -> None:
    """Every published port binds 127.0.0.1; redis and the service are reachable from the
    host, the workers publish nothing."""
    svc = services(compose())
    for name, spec in svc.items():
        for port in spec.get("ports", []):
            assert _host_ip(port) == "127.0.0.1", (name, port)
    assert [p.split(":")[-1] for p in svc["redis"]["ports"]] == ["6379"]
    assert [p.split(":")[-1] for p in svc["service"]["ports"]] == ["8765"]
    for name in WORKERS:
        assert "ports" not in svc[name]


@pytest.mark.parametrize(("port", "ip"), [("127.0.0.1:1:1", "127.0.0.1"), ("1:1", ""), ("1", "")])
def test_host_ip(port: str, ip: str) -> None:
    """A port entry without an address publishes on every interface."""
    assert _host_ip(port) == ip


def test_redis_persists_and_takes_its_password_from_the_environment() -> None:
    """Redis runs with an append-only file on a volume, never evicts, and takes its
    password from the environment, never from the command line; the other services reach
    it with that password."""
    svc = services(compose())
    redis = svc["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert '--requirepass "$REDIS_PASSWORD"' in command  # expanded by the container's shell
    assert PASSWORD not in command
    assert redis["environment"]["REDIS_PASSWORD"] == PASSWORD
    assert any(v.endswith(":/data") for v in redis["volumes"])
    for name in ("service", *WORKERS):
        assert svc[name]["environment"]["REDIS_URL"] == f"redis://:{PASSWORD}@redis:6379/0"


@pytest.mark.parametrize("memory_gb", [None, "12.5", "3"])
@pytest.mark.parametrize("name", WORKERS)
def test_worker_memory_limit_matches_memory_gb(name: str, memory_gb: str | None) -> None:
    """A worker container's memory limit is the memory its worker packs units into
    (--worker-memory-gb GiB), whatever .env sets, and swap is off (memswap_limit = mem_limit)."""
    variable = "WORKER_CPU_MEMORY_GB" if name == "worker-cpu" else "WORKER_GPU_MEMORY_GB"
    spec = services(compose(**({variable: memory_gb} if memory_gb else {})))[name]
    params = worker_params(spec["command"])
    if memory_gb is not None:
        assert params["memory_gb"] == float(memory_gb)
    assert compose_bytes(spec["mem_limit"]) == params["memory_gb"] * GIB
    assert compose_bytes(spec["memswap_limit"]) == compose_bytes(spec["mem_limit"])


def test_gpu_worker_is_optional_and_reserves_its_gpus() -> None:
    """worker-gpu starts only with its profile and reserves as many NVIDIA GPUs as its
    --gpus says; worker-cpu starts by default and serves the cpu queue."""
    svc = services(compose())
    gpu = svc["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    params = worker_params(gpu["command"])
    assert params["queues"] == ("gpu",)
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1
    assert devices[0]["driver"] == "nvidia"
    assert "gpu" in devices[0]["capabilities"]
    assert int(devices[0]["count"]) == params["gpus"] >= 1
    assert "profiles" not in svc["worker-cpu"]
    assert worker_params(svc["worker-cpu"]["command"])["queues"] == ("cpu",)


def test_one_store_volume_is_shared() -> None:
    """The service and every worker mount the same named volume at their SIMRUN_STORE."""
    doc = compose()
    mounts = {}
    for name in ("service", *WORKERS):
        spec = services(doc)[name]
        store = spec["environment"]["SIMRUN_STORE"]
        found = [v.split(":")[0] for v in spec["volumes"] if v.split(":")[1:2] == [store]]
        assert len(found) == 1, (name, spec["volumes"])
        mounts[name] = found[0]
    assert set(mounts.values()) == {"store"}
    assert "store" in doc["volumes"]


def test_workers_have_a_local_scratch_volume_each() -> None:
    """Every worker container keeps its tasks' scratch (SIMRUN_SCRATCH_DIR) on a volume of
    its own, an anonymous one (one per container, also when scaled), not the store."""
    for name in WORKERS:
        spec = services(compose())[name]
        scratch = spec["environment"]["SIMRUN_SCRATCH_DIR"]
        assert scratch in spec["volumes"], (name, spec["volumes"])
        assert scratch != spec["environment"]["SIMRUN_STORE"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_images_give_the_worker_user_its_scratch_directory(dockerfile: Path) -> None:
    """The worker images make the compose file's SIMRUN_SCRATCH_DIR, owned by the worker's
    user: an anonymous volume mounted there starts as a copy of it (else root's)."""
    scratch = services(compose())["worker-cpu"]["environment"]["SIMRUN_SCRATCH_DIR"]
    text = dockerfile.read_text()
    (made,) = re.findall(r"mkdir -p ([^\\\n&]+)", text)
    (owned,) = re.findall(r"chown simrun:simrun ([^\\\n&]+)", text)
    assert {"/store", scratch} <= set(made.split()), made
    assert {"/store", scratch} <= set(owned.split()), owned


def test_every_service_has_a_health_check_and_a_restart_policy() -> None:
    """Every service has a health check that is not disabled and restarts on failure."""
    for name, spec in services(compose()).items():
        check = spec.get("healthcheck", {})
        assert check.get("test"), name
        assert not check.get("disable"), name
        assert spec.get("restart") in ("always", "unless-stopped", "on-failure"), name


def test_worker_health_checks_run_the_health_module() -> None:
    """The workers' health check is ``python -m simrun.worker.health`` with arguments the
    health command accepts."""
    for name in WORKERS:
        test = services(compose())[name]["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python", "-m", "simrun.worker.health"]
        health_main.make_context("worker-health", list(test[4:]))


@pytest.mark.parametrize("name", WORKERS)
def test_stop_grace_period_covers_the_workers_grace(name: str) -> None:
    """docker compose waits long enough after SIGTERM for the worker to finish its units
    within --grace-s and then report what it hands back."""
    spec = services(compose())[name]
    grace_s = worker_params(spec["command"])["grace_s"]
    assert grace_s > 0
    assert seconds(spec["stop_grace_period"]) >= grace_s + HAND_BACK_S


@pytest.mark.parametrize("name", WORKERS)
def test_worker_command_parses_with_simrun_worker(name: str) -> None:
    """The worker's command line is accepted by the real ``simrun worker``, and Redis
    comes from REDIS_URL in the environment rather than a flag."""
    spec = services(compose())[name]
    assert "--redis-url" not in spec["command"]
    params = worker_params(spec["command"], spec["environment"])
    assert params["redis_url"] == spec["environment"]["REDIS_URL"]
    assert params["queues"] == (name.removeprefix("worker-"),)
    assert params["memory_gb"] is not None
    assert params["processes"] is not None


def test_a_bad_worker_command_is_caught() -> None:
    """Parsing a worker command line fails on a flag ``simrun worker`` does not know."""
    with pytest.raises(click.UsageError):
        worker_params(["--queue", "cpu", "--memory", "8"])


def service_params(args: list[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The parameters the real ``simrun service`` parses from ``args`` in the environment
    ``env`` (none by default), without running it."""
    with mock.patch.dict(os.environ, env or {}, clear=True):
        ctx = service_command.make_context("service", list(args))
    return dict(ctx.params)


def test_service_runs_from_the_worker_image() -> None:
    """The service uses the image worker-cpu builds and runs ``simrun service`` on all
    container interfaces at the port compose publishes, with Redis and the store from the
    environment; its health check asks /health on that port."""
    svc = services(compose())["service"]
    assert svc["image"] == services(compose())["worker-cpu"]["image"]
    assert svc["build"] == services(compose())["worker-cpu"]["build"]
    assert svc["entrypoint"][-2:] == ["simrun", "service"]
    params = service_params(svc["command"], svc["environment"])
    assert params["host"] == "0.0.0.0"
    assert svc["ports"] == [f"127.0.0.1:{SERVICE_PORT}:{params['port']}"]
    assert "--redis-url" not in svc["command"]
    assert "--store" not in svc["command"]
    assert params["redis_url"] == svc["environment"]["REDIS_URL"]
    assert params["store"] == Path(svc["environment"]["SIMRUN_STORE"])
    assert params["token"] is None  # SIMRUN_TOKEN empty: no token
    assert f"http://127.0.0.1:{params['port']}/health" in " ".join(svc["healthcheck"]["test"])


def heartbeat_ttl_s(worker_args: list[str]) -> float:
    """The seconds a worker's heartbeat lives with these ``simrun worker`` arguments."""
    params = worker_params(worker_args)
    ttl: float | None = params["heartbeat_ttl_s"]
    return TTL_PER_INTERVAL * params["heartbeat_s"] if ttl is None else ttl


@pytest.mark.parametrize(
    "env",
    [{}, {"WORKER_CPU_MEMORY_GB": "12.5"}, {"WORKER_CPU_PROCESSES": "16"}],
    ids=["example", "memory", "processes"],
)
def test_service_default_shape_is_the_cpu_workers(env: dict[str, str]) -> None:
    """The worker shape the service's /metrics decides with while no worker is live
    (--worker-memory-gb, --worker-processes) is worker-cpu's --worker-memory-gb and --processes,
    whatever .env sets them to."""
    svc = services(compose(**env))
    service = service_params(svc["service"]["command"])
    cpu = worker_params(svc["worker-cpu"]["command"])
    assert service["worker_memory_gb"] == cpu["memory_gb"]
    assert service["worker_processes"] == cpu["processes"]
    for variable, value in env.items():
        key = "worker_memory_gb" if variable.endswith("MEMORY_GB") else "worker_processes"
        assert service[key] == type(service[key])(value)


def test_heartbeat_ttl_s() -> None:
    """A worker's heartbeat lives --heartbeat-ttl-s when given, else 4 x --heartbeat-s."""
    assert heartbeat_ttl_s(["--heartbeat-s", "0.5"]) == 2.0
    assert heartbeat_ttl_s(["--heartbeat-s", "0.5", "--heartbeat-ttl-s", "3"]) == 3.0


@pytest.mark.parametrize("name", WORKERS)
def test_service_heartbeat_ttl_covers_the_workers(name: str) -> None:
    """The service waits at least as long as a worker's heartbeat lives before it gives
    that worker's jobs to others (a shorter wait would re-dispatch jobs of a live worker)."""
    svc = services(compose())
    service = service_params(svc["service"]["command"])
    assert service["heartbeat_ttl_s"] >= heartbeat_ttl_s(svc[name]["command"])


def test_kubernetes_service_matches_its_workers() -> None:
    """The Kubernetes service's worker shape is the worker Deployment's --worker-memory-gb and
    --processes, and its heartbeat TTL covers the worker's."""
    service = service_params(_container(kube("Deployment", "simrun-service"))["args"])
    args = _container(kube("Deployment", "simrun-worker-cpu"))["args"]
    cpu = worker_params(args)
    assert service["worker_memory_gb"] == cpu["memory_gb"]
    assert service["worker_processes"] == cpu["processes"]
    assert service["heartbeat_ttl_s"] >= heartbeat_ttl_s(args)


def test_a_bad_service_command_is_caught() -> None:
    """Parsing a service command line fails on a flag ``simrun service`` does not know."""
    with pytest.raises(click.UsageError):
        service_params(["--listen", "0.0.0.0"])


# --- the Dockerfiles --------------------------------------------------------------------------


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_worker_images_run_simrun_worker_unprivileged(path: Path) -> None:
    """A worker image runs ``simrun worker`` under tini as a numeric non-root user, checks
    its health with the heartbeat module, and installs the plugin requirements."""
    steps = instructions(path)
    entry = [json.loads(a) for w, a in steps if w == "ENTRYPOINT"]
    assert entry == [["tini", "--", "simrun", "worker"]]
    users = [a for w, a in steps if w == "USER"]
    assert users, "no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    health = [a for w, a in steps if w == "HEALTHCHECK"]
    assert len(health) == 1
    command = json.loads(health[0].split(" CMD ", 1)[1])
    assert command[:3] == ["python", "-m", "simrun.worker.health"]
    assert any(w == "ARG" and a.startswith("PLUGINS") for w, a in steps)
    installs = [a for w, a in steps if w == "RUN" and "pip install" in a]
    assert len(installs) == 1
    words = shlex.split(installs[0])
    assert "$PLUGINS" in words
    assert words[words.index("-r") + 1] == "workers/plugins.txt"


# --- deploy/kubernetes --------------------------------------------------------------------


def _container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def test_kubernetes_worker_matches_its_flags() -> None:
    """The Kubernetes worker's args parse with ``simrun worker``; its memory limit is its
    --worker-memory-gb; its grace period covers --grace-s; its liveness probe is the health
    module; it mounts the store PVC at SIMRUN_STORE."""
    deployment = kube("Deployment", "simrun-worker-cpu")
    container = _container(deployment)
    params = worker_params(container["args"])
    assert params["queues"] == ("cpu",)
    assert kube_bytes(container["resources"]["limits"]["memory"]) == params["memory_gb"] * GIB
    assert kube_bytes(container["resources"]["requests"]["memory"]) == params["memory_gb"] * GIB
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= params["grace_s"] + HAND_BACK_S
    probe = container["livenessProbe"]["exec"]["command"]
    assert probe[:3] == ["python", "-m", "simrun.worker.health"]
    health_main.make_context("worker-health", list(probe[3:]))
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["REDIS_URL"]["valueFrom"]
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mount["store"] == env["SIMRUN_STORE"]["value"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims["store"] == "simrun-store"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_kubernetes_worker_scratch_is_an_empty_dir() -> None:
    """The Kubernetes worker keeps its tasks' scratch (SIMRUN_SCRATCH_DIR) on an emptyDir of
    the pod, with room asked for as ephemeral storage."""
    deployment = kube("Deployment", "simrun-worker-cpu")
    container = _container(deployment)
    env = {e["name"]: e for e in container["env"]}
    scratch = env["SIMRUN_SCRATCH_DIR"]["value"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[scratch]]
    size = kube_bytes(volumes[mounts[scratch]]["emptyDir"]["sizeLimit"])
    assert kube_bytes(container["resources"]["requests"]["ephemeral-storage"]) == size


def test_kubernetes_service_is_a_single_writer() -> None:
    """The service runs as one replica that is replaced, never rolled (one SQLite writer),
    is probed on /health, and a Service exposes its port."""
    deployment = kube("Deployment", "simrun-service")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    container = _container(deployment)
    assert container["command"][-2:] == ["simrun", "service"]
    port = service_params(container["args"])["port"]
    assert container["ports"][0]["containerPort"] == port
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    service = kube("Service", "simrun-service")
    assert service["spec"]["ports"][0]["port"] == 8765
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    claim = kube("PersistentVolumeClaim", "simrun-store")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_keda_scales_the_worker_on_the_desired_workers_metric() -> None:
    """The ScaledObject scales the worker Deployment that exists, on
    simrun_desired_workers{queue="cpu"} with threshold 1 (replicas = the metric)."""
    scaled = kube("ScaledObject", "simrun-worker-cpu")
    target = scaled["spec"]["scaleTargetRef"]["name"]
    kube("Deployment", target)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert 'simrun_desired_workers{queue="cpu"}' in trigger["metadata"]["query"]
    assert trigger.get("metricType", "AverageValue") == "AverageValue"
    assert float(trigger["metadata"]["threshold"]) == 1
    assert 0 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
