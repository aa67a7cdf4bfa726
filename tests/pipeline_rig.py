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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.aggregate import Aggregator, stage
from pipeline.source import Producer, SourceLog, generate
from pipeline.store import ObjectStore, open_store
from ripple.launch import worker_argv
from tests.cluster import ADMIN, Cluster, call
from tests.support import Proc, free_ports, wait_until

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
BATCH_INTERVAL_S = 0.2


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
        worker_args: tuple[str, ...] = (),
        oracle_reads_rows: bool = False,
    ) -> None:
        self.cluster = Cluster(root, store=store_uri, **(settings or SETTINGS))
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
        self.worker_args = worker_args
        # On a Spark whose executors cannot see our files the oracle sends the rows it read
        # (the arrow path's way), on its own session of that server.
        self.oracle_reads_rows = oracle_reads_rows
        self._oracle: Aggregator | None = None

    def start_worker(self, wid: str, *extra: str) -> Proc:
        """Start `wid` (again, after its previous process has exited: same id, new port)."""
        old = self.workers.get(wid)
        if old is not None:
            assert not old.alive(), f"{wid} is still running (pid {old.pid})"
            old.stop()  # closes its log
        port = free_ports(1)[0]
        argv = worker_argv(
            worker_id=wid,
            listen=f"127.0.0.1:{port}",
            store=self.store_uri,
            spark_remote=self.spark,
            coordinators=[s.url for s in self.cluster.specs],
            batch_interval_s=BATCH_INTERVAL_S,
            s3_endpoint=self.worker_s3_endpoint,
            extra=[*self.worker_args, *extra],
        )
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
        segments = [seg for p in range(PARTITIONS) for seg in self.source.segments(p)]
        if self.oracle_reads_rows:
            if self._oracle is None:
                self._oracle = Aggregator(self.spark, own_session=True)
            rows = pa.concat_tables([self.source.read_segment(seg) for seg in segments])
            batch = self._oracle.batch_job_table(rows)
        else:
            staging = tempfile.mkdtemp(prefix="oracle-", dir=self.cluster.root)
            paths = [stage(self.store, seg, staging) for seg in segments]
            batch = Aggregator(self.spark).batch_job(paths)
        return {k: (v.count, v.sum, v.min, v.max, v.last) for k, v in batch.items()}

    def check_equal_to_batch_job(self) -> int:
        parts = wait_until(self.caught_up, "pipeline caught up", CATCH_UP_TIMEOUT_S, 0.2)
        got, want = self.state(parts), self.oracle()
        assert got == want
        return sum(v[0] for v in want.values())

    def metric(self, wid: str, name: str) -> int:
        text = call("GET", f"http://127.0.0.1:{self.ports[wid]}/metrics").body
        samples = [line.split() for line in text.splitlines() if not line.startswith("#")]
        return int(float(next(value for metric, value in samples if metric == name)))

    def running(self) -> Iterator[Pipeline]:
        """Start the coordinators, wait for a leader, yield, stop everything (a fixture body)."""
        self.cluster.start_all()
        try:
            self.cluster.ready()
            yield self
        finally:
            self.stop()

    def stop(self) -> None:
        for proc in self.workers.values():
            proc.stop()
        self.cluster.stop_all()
        if self._oracle is not None:
            self._oracle.close()


def failures_moves_and_drain(pipeline: Pipeline) -> None:
    """Three workers catch up; kill -9 of a worker under load; kill -9 of the leader; a
    rebalance onto a new worker; a drain. After each, every key equals the batch job."""
    p, c = pipeline, pipeline.cluster
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    p.producer.produce(generate(3000, 40, seed=1))
    t0 = time.monotonic()
    total = p.check_equal_to_batch_job()
    print(
        f"\n[{p.store_uri.split(':')[0]}] {total} records caught up in "
        f"{time.monotonic() - t0:.1f} s"
    )

    metrics = call("GET", f"http://127.0.0.1:{p.ports['w3']}/metrics").body
    assert "ripple_worker_records_total" in metrics and "ripple_worker_lease_valid 1" in metrics
    counted = sum(p.metric(w, "ripple_worker_records_total") for w in ("w1", "w2", "w3"))
    assert counted == total

    # kill -9 a worker while new input arrives; its partitions replay from checkpoints.
    p.producer.produce(generate(2000, 40, seed=2))
    p.workers["w1"].kill9()
    killed_at = time.monotonic()
    wait_until(
        lambda: all(x["owner"] != "w1" for x in p.table()),
        "w1's partitions moved",
        SETTINGS["heartbeat_timeout_s"] + 10,
    )
    p.check_equal_to_batch_job()
    print(
        f"worker kill -> its partitions caught up elsewhere: {time.monotonic() - killed_at:.1f} s"
    )

    # kill -9 the leader, then an admin rebalance onto a new worker, then a drain.
    c.kill9(c.leader())
    p.start_worker("w4")
    wait_until(
        lambda: any(
            w["worker_id"] == "w4" and w["state"] == "active"
            for w in c.get(c.leader(), "/v1/workers").body["workers"]
        ),
        "w4 registered",
        60,
    )
    r = c.write_via_any("/v1/admin/reassign", {"strategy": "balance"}, token=ADMIN)
    assert r.status == 202 and r.body["migrations"], r
    p.producer.produce(generate(1500, 40, seed=3))
    wait_until(
        lambda: c.get(c.leader(), "/v1/migrations").body["in_flight"] == 0, "rebalance done", 60
    )
    d = c.write_via_any("/v1/workers/w2/drain", {}, token=ADMIN)
    assert d.status == 202, d
    p.producer.produce(generate(1500, 40, seed=4))
    wait_until(
        lambda: (
            {w["worker_id"]: w["state"] for w in c.get(c.leader(), "/v1/workers").body["workers"]}[
                "w2"
            ]
            == "left"
        ),
        "w2 drained",
        60,
    )
    total = p.check_equal_to_batch_job()
    assert total == 8000
    owners = {x["owner"] for x in p.table()}
    assert owners == {"w3", "w4"}
