"""The deployment files keep the service's SQLite file on a volume of its own, apart from the
store the workers share (issue 15 item 7): compose's local volume, Kubernetes' ReadWriteOnce
claim, and ``simrun service`` reading its place from SIMRUN_DB; and they show how to add the
workers of a task image (item 4)."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from unittest import mock

import yaml

from simrun.cli.service import service as service_command
from simrun.core.sizing import image_queue
from tests.composefile import compose, services
from tests.integration.test_deploy_files import ROOT, kube, worker_params


def test_compose_gives_the_service_database_a_volume_no_worker_mounts() -> None:
    """The service's SIMRUN_DB lies under a named volume that only the service mounts; the
    store volume holds no database."""
    doc = compose()
    svc = services(doc)["service"]
    db = PurePosixPath(svc["environment"]["SIMRUN_DB"])
    mounts = dict(v.split(":", 1)[::-1] for v in svc["volumes"])
    volume = mounts[str(db.parent)]
    assert volume in doc["volumes"]
    for name, other in services(doc).items():
        if name != "service":
            assert all(not v.startswith(f"{volume}:") for v in other.get("volumes", []))


def test_kubernetes_mounts_a_read_write_once_claim_where_simrun_db_points() -> None:
    """The service Deployment's SIMRUN_DB is under a volume of a ReadWriteOnce claim."""
    pod = kube("Deployment", "simrun-service")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    db = PurePosixPath(env["SIMRUN_DB"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(db.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claim = kube("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_simrun_service_reads_its_database_path_from_simrun_db() -> None:
    """`simrun service` takes --db from SIMRUN_DB; --db-on-network-fs is off by default."""
    with mock.patch.dict(os.environ, {"SIMRUN_DB": "/var/lib/simrun/simrun.db"}, clear=True):
        ctx = service_command.make_context("service", [])
    assert str(ctx.params["db_path"]) == "/var/lib/simrun/simrun.db"
    assert ctx.params["db_on_network_fs"] is False


def test_the_image_worker_examples_serve_their_image_under_the_name_scale_uses() -> None:
    """The Kubernetes example of an image's workers runs `simrun worker --image NAME` under
    the Deployment name `simrun scale --apply kubernetes` scales for that image's queue;
    the compose file's commented example names the same service."""
    path = ROOT / "deploy" / "kubernetes" / "examples" / "worker-image-solver.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
    image = args[args.index("--image") + 1]
    name = image_queue(image).worker
    assert doc["metadata"]["name"] == f"simrun-worker-{name}"
    assert f"# worker-{name}:" in (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert worker_params(args)["images"] == (image,)
