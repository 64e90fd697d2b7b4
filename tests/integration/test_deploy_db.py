"""The deployment files keep the service's SQLite file on a volume of its own, apart from the
store the workers share (issue 15 item 7): compose's local volume, Kubernetes' ReadWriteOnce
claim, and ``simrun service`` reading its place from SIMRUN_DB."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from unittest import mock

from simrun.cli.service import service as service_command
from tests.composefile import compose, services
from tests.integration.test_deploy_files import kube


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
    assert str(ctx.params["db"]) == "/var/lib/simrun/simrun.db"
    assert ctx.params["db_on_network_fs"] is False
