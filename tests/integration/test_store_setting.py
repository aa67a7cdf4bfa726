"""A worker that cannot checkpoint says so: real coordinator processes (and one real worker).

A worker whose store is not the cluster's would have every checkpoint fenced: its
registration is refused (409 `store_mismatch`, both stores named, user information left
out) and a real `ripple worker` exits 2 with that message. A cluster without the `store`
setting fences every checkpoint: `/v1/health`, `/v1/status` and `ripple status` say so.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from testkit.cluster import Cluster
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration.test_cli import ripple


def register(c: Cluster, leader: str, wid: str, store: str | None) -> tuple[int, dict[str, str]]:
    body = {"worker_id": wid, "address": "http://127.0.0.1:9"}
    if store is not None:
        body["store"] = store
    r = c.post(leader, "/v1/workers", body)
    return r.status, r.body


def test_a_worker_with_another_store_is_refused_at_registration(tmp_path: Path) -> None:
    c = Cluster(tmp_path, nodes=1, store="s3://ripple-bucket/pipeline")
    c.start_all()
    try:
        leader = c.ready()
        health = c.get(leader, "/v1/health").body
        assert (health["store_set"], health["warnings"]) == (True, [])
        same_store = ("s3://ripple-bucket/pipeline", "s3://ripple-bucket/pipeline/", None)
        for i, same in enumerate(same_store):
            status, body = register(c, leader, f"good-{i}", same)
            assert status == 200, (same, body)
        status, body = register(c, leader, "other", "s3://other-bucket/pipeline")
        assert (status, body["error"], body["field"]) == (409, "store_mismatch", "store")
        assert "s3://other-bucket/pipeline" in body["message"]
        assert "s3://ripple-bucket/pipeline" in body["message"]
        # A URI with user information is named without it.
        status, body = register(c, leader, "other", "s3://AKIAKEY:s3cret@other-bucket/p")
        assert status == 409
        assert "s3cret" not in body["message"] and "AKIAKEY" not in body["message"]
        assert "s3://***@other-bucket/p" in body["message"], body
        status, body = register(c, leader, "other", "ftp://somewhere/else")
        assert (status, body["field"]) == (400, "store"), body
        workers = c.get(leader, "/v1/workers?consistent=true").body["workers"]
        # Nothing of the refused ones.
        assert [w["worker_id"] for w in workers] == ["good-0", "good-1", "good-2"]
    finally:
        c.stop_all()


def test_a_cluster_without_a_store_says_so(tmp_path: Path) -> None:
    c = Cluster(tmp_path, nodes=1, store="")
    c.start_all()
    try:
        leader = c.ready()
        health = c.get(leader, "/v1/health").body
        assert health["store_set"] is False
        assert len(health["warnings"]) == 1 and "sets no store" in health["warnings"][0]
        assert c.get(leader, "/v1/status").body["warnings"] == health["warnings"]
        # Nothing to compare a worker's store with: it registers (and is warned at start).
        assert register(c, leader, "w1", "file:///somewhere")[0] == 200
        out = ripple("status", "--coordinator", c.url(leader), "--data-dir", str(tmp_path / "x"))
        assert out.returncode == 0, out.stderr
        assert "warning: the cluster file sets no store: every checkpoint is fenced" in out.stdout
    finally:
        c.stop_all()


def test_a_real_worker_with_another_store_exits_saying_why(
    tmp_path: Path, spark_remote: str
) -> None:
    p = PipelineRig(tmp_path, f"file://{tmp_path / 'store'}", spark_remote)
    p.cluster.start_all()
    try:
        p.cluster.ready()
        elsewhere = f"file://{tmp_path / f'elsewhere-{uuid.uuid4().hex[:6]}'}"
        w = p.start_worker("w1", "--store", elsewhere)
        wait_until(lambda: not w.alive(), "the worker exits", 120)
        assert w.popen.returncode == 2
        log = w.output()
        assert "ripple worker: refusing to start: this worker's store" in log, log[-2000:]
        assert elsewhere in log and p.store_uri in log
        assert p.cluster.get(p.cluster.leader(), "/v1/workers").body["workers"] == []
    finally:
        p.stop()
