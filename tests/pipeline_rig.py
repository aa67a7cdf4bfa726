"""The pipeline rig: three coordinator processes and real `ripple worker` processes on one
shared Spark Connect server, over a local-directory store or a real S3 protocol endpoint.

Used by tests/integration/test_pipeline.py and tests/chaos/test_pipeline_chaos.py. The oracle
is one Spark batch job over the whole source log; `caught_up` is the point where every
partition is ONLINE and its owner has processed the whole log, so the two must be equal.
Every process is a `tests.support.Proc` ended by its PID.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeline.aggregate import Aggregator, stage
from pipeline.source import Producer, SourceLog
from pipeline.store import ObjectStore, open_store
from tests.cluster import Cluster, call
from tests.support import Proc, free_ports, python_argv, wait_until

PARTITIONS = 8
SETTINGS = {
    "total_partitions": PARTITIONS,
    "min_cluster_size": 3,
    "heartbeat_interval_s": 0.3,
    "suspect_after_s": 1.0,
    "lease_s": 1.5,
    "heartbeat_timeout_s": 3.0,
    "checkpoint_interval_s": 1.0,
}
CATCH_UP_TIMEOUT_S = 90.0


class Pipeline:
    def __init__(
        self,
        root: Path,
        store_uri: str,
        spark: str,
        s3_endpoint: str | None,
        *,
        worker_s3_endpoint: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.cluster = Cluster(root, **(settings or SETTINGS))
        self.store_uri = store_uri
        self.spark = spark
        # The test's own store (producer, oracle) talks to `s3_endpoint`; workers may be
        # given another one (the chaos scenario's fault proxy in front of the same server).
        self.s3_endpoint = s3_endpoint
        self.worker_s3_endpoint = worker_s3_endpoint or s3_endpoint
        self.store: ObjectStore = open_store(store_uri, s3_endpoint)
        self.source = SourceLog(self.store, PARTITIONS)
        self.producer = Producer(self.store, PARTITIONS)
        self.workers: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}

    def start_worker(self, wid: str, *extra: str) -> Proc:
        """Start `wid` (again, after its previous process has exited: same id, new port)."""
        old = self.workers.get(wid)
        if old is not None:
            assert not old.alive(), f"{wid} is still running (pid {old.pid})"
            old.stop()  # closes its log
        port = free_ports(1)[0]
        argv = python_argv(
            "-m",
            "coordinator.cli",
            "worker",
            "--worker-id",
            wid,
            "--listen",
            f"127.0.0.1:{port}",
            "--store",
            self.store_uri,
            "--spark-remote",
            self.spark,
            "--batch-interval-s",
            "0.2",
        )
        if self.worker_s3_endpoint:
            argv += ["--s3-endpoint", self.worker_s3_endpoint]
        argv += list(extra)
        for s in self.cluster.specs:
            argv += ["--coordinator", s.url]
        proc = Proc(
            argv, self.cluster.root / "logs" / f"{wid}.log", env={"PYSPARK_PYTHON": sys.executable}
        )
        self.workers[wid], self.ports[wid] = proc, port
        return proc

    def health(self, wid: str) -> dict[str, Any] | None:
        try:
            r = call("GET", f"http://127.0.0.1:{self.ports[wid]}/v1/health", timeout_s=3.0)
        except OSError:
            return None
        return r.body if r.status == 200 else None

    def table(self) -> list[dict[str, Any]]:
        leader = self.cluster.leader()
        return self.cluster.get(leader, "/v1/partitions?consistent=true").body["partitions"]  # type: ignore[no-any-return]

    def caught_up(self) -> list[dict[str, Any]] | None:
        """Every partition ONLINE, and its owner has processed the whole source log."""
        parts = self.table()
        if any(p["status"] != "online" for p in parts):
            return None
        healths = {w: self.health(w) for w in self.workers if self.workers[w].alive()}
        for p in parts:
            h = healths.get(p["owner"])
            mine = (h or {}).get("partitions", {}).get(str(p["partition"]))
            if mine is None or mine["epoch"] != p["epoch"]:
                return None
            if mine["offset"] != self.source.end_offset(p["partition"]):
                return None
        return parts

    def state(self, parts: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {}
        for p in parts:
            port = self.ports[p["owner"]]
            r = call("GET", f"http://127.0.0.1:{port}/v1/partitions/{p['partition']}/state")
            assert r.status == 200, r
            for key, v in r.body["keys"].items():
                assert key not in out
                out[key] = (v["count"], v["sum"], v["min"], v["max"], v["last"])
        return out

    def oracle(self) -> dict[str, tuple[Any, ...]]:
        staging = tempfile.mkdtemp(prefix="oracle-", dir=self.cluster.root)
        paths = [
            stage(self.store, seg, staging)
            for p in range(PARTITIONS)
            for seg in self.source.segments(p)
        ]
        agg = Aggregator(self.spark)
        batch = agg.batch_job(paths)
        return {k: (v.count, v.sum, v.min, v.max, v.last) for k, v in batch.items()}

    def check_equal_to_batch_job(self) -> int:
        parts = wait_until(self.caught_up, "pipeline caught up", CATCH_UP_TIMEOUT_S, 0.2)
        got, want = self.state(parts), self.oracle()
        assert got == want
        return sum(v[0] for v in want.values())

    def stop(self) -> None:
        for proc in self.workers.values():
            proc.stop()
        self.cluster.stop_all()
