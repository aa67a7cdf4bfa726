"""The pipeline rig: three coordinator processes and real `ripple worker` processes on one
Spark Connect server, over a local-directory store or a real S3 protocol endpoint.

The integration and chaos tests check the pipeline on it; the pipeline benchmarks time it.
The Spark server is the caller's (a session-wide one, a benchmark's own, a standalone
cluster): the rig only hands its URL to the workers and the oracle. The oracle is one Spark
batch job over the whole source log; `caught_up` is the point where every partition is
ONLINE and its owner has processed the whole log, so at that point the two must be equal.
Every process is a `testkit.process.Proc` ended by its PID.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.aggregate import Aggregator, stage
from pipeline.source import Producer, SourceLog
from pipeline.store import ObjectStore, open_store
from ripple.launch import worker_argv
from shared.ports import free_ports
from testkit.cluster import Cluster
from testkit.http import call
from testkit.process import Proc
from testkit.prom import parse, value
from testkit.wait import wait_until

__all__ = [
    "BATCH_INTERVAL_S",
    "CATCH_UP_TIMEOUT_S",
    "PARTITIONS",
    "SETTINGS",
    "START_TIMEOUT_S",
    "PipelineRig",
]

PARTITIONS = 8
# Short timeouts, so a failure is detected and healed in seconds rather than minutes.
SETTINGS: dict[str, Any] = {
    "total_partitions": PARTITIONS,
    "min_cluster_size": 3,
    "heartbeat_interval_s": 0.3,
    "suspect_after_s": 1.0,
    "lease_s": 1.5,
    "heartbeat_timeout_s": 3.0,
    "checkpoint_interval_s": 1.0,
}
CATCH_UP_TIMEOUT_S = 90.0
# A worker's start (Python, the Spark Connect session, the start-up probe) when other Spark
# jobs share the cores.
START_TIMEOUT_S = 300.0
BATCH_INTERVAL_S = 0.2
WORKER_CALL_TIMEOUT_S = 3.0


class PipelineRig:
    def __init__(
        self,
        root: Path,
        store_uri: str,
        spark: str,
        s3_endpoint: str | None = None,
        *,
        worker_s3_endpoint: str | None = None,
        settings: dict[str, Any] | None = None,
        worker_args: tuple[str, ...] = (),
        oracle_reads_rows: bool = False,
    ) -> None:
        """`spark`: the sc:// URL of a running Spark Connect server."""
        self.cluster = Cluster(root, store=store_uri, **(settings or SETTINGS))
        self.store_uri = store_uri
        self.spark = spark
        # The rig's own store (producer, oracle) talks to `s3_endpoint`; workers may be
        # given another one (the chaos scenario's fault proxy in front of the same server).
        self.s3_endpoint = s3_endpoint
        self.worker_s3_endpoint = worker_s3_endpoint or s3_endpoint
        self.store: ObjectStore = open_store(store_uri, s3_endpoint)
        self.source = SourceLog(self.store, PARTITIONS)
        self.producer = Producer(self.store, PARTITIONS)
        self.workers: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.worker_env: dict[str, dict[str, str]] = {}  # worker id -> its own variables
        self.worker_args = worker_args
        # On a Spark whose executors cannot see our files the oracle sends the rows it read
        # (the arrow path's way), on its own session of that server.
        self.oracle_reads_rows = oracle_reads_rows
        self._oracle: Aggregator | None = None

    def start_worker(
        self,
        wid: str,
        *extra: str,
        batch_interval_s: float = BATCH_INTERVAL_S,
        env: dict[str, str] | None = None,
    ) -> Proc:
        """Start `wid` (again, after its previous process has exited: same id, new port).
        `env`: variables of its own over the inherited ones (a fault shim for this worker
        alone); kept for its restarts."""
        if env is not None:
            self.worker_env[wid] = dict(env)
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
            batch_interval_s=batch_interval_s,
            s3_endpoint=self.worker_s3_endpoint,
            # The same directory every time: a worker started again rejoins as itself.
            state_dir=self.cluster.root / "worker-state" / wid,
            extra=[*self.worker_args, *extra],
        )
        proc = Proc(argv, self.cluster.root / "logs" / f"{wid}.log", env=self.env_of(wid))
        self.workers[wid], self.ports[wid] = proc, port
        return proc

    def restart_worker(self, wid: str) -> Proc:
        """Start `wid` again with exactly the command line of its last process (same port,
        same state directory), as a supervisor restarts a service; that one has exited."""
        old = self.workers[wid]
        assert not old.alive(), f"{wid} is still running (pid {old.pid})"
        old.stop()  # closes its log
        proc = Proc(old.argv, old.log_path, env=self.env_of(wid))
        self.workers[wid] = proc
        return proc

    def env_of(self, wid: str) -> dict[str, str]:
        """What a start of `wid` sets over the inherited environment."""
        return {"PYSPARK_PYTHON": sys.executable, **self.worker_env.get(wid, {})}

    def worker_url(self, wid: str) -> str:
        return f"http://127.0.0.1:{self.ports[wid]}"

    def health(self, wid: str) -> dict[str, Any] | None:
        try:
            r = call("GET", self.worker_url(wid) + "/v1/health", timeout_s=WORKER_CALL_TIMEOUT_S)
        except OSError:
            return None
        return r.body if r.status == 200 else None

    def ready(self, wid: str) -> bool:
        """`wid` answers its readiness probe: registered, leased, its partitions open."""
        try:
            r = call("GET", self.worker_url(wid) + "/v1/ready", timeout_s=WORKER_CALL_TIMEOUT_S)
        except OSError:
            return False
        return r.status == 200

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Every started worker ready (a worker's start on a loaded machine takes minutes)."""
        for wid in self.workers:
            wait_until(partial(self.ready, wid), f"{wid} ready", timeout_s, 0.5)

    def routing(self) -> list[int]:
        """Every routing generation's partition count, from the leader's cluster summary (a
        rescale adds one)."""
        leader = self.cluster.leader()
        cluster = self.cluster.get(leader, "/v1/health").body["cluster"]
        counts = cluster.get("routing") or [cluster["total_partitions"]]
        return [int(n) for n in counts]

    def current_source(self) -> SourceLog:
        """The source log with every generation the cluster has made."""
        return SourceLog(self.store, self.routing())

    def table(self) -> list[dict[str, Any]]:
        leader = self.cluster.leader()
        return self.cluster.get(leader, "/v1/partitions?consistent=true").body["partitions"]  # type: ignore[no-any-return]

    def caught_up(self) -> list[dict[str, Any]] | None:
        """Every partition ONLINE, and its owner has processed the whole source log (of the
        current routing generation)."""
        source = self.current_source()
        parts = self.table()
        if len(parts) != source.total_partitions:
            return None  # a rescale replaced the table between the two reads
        if any(p["status"] != "online" for p in parts):
            return None
        healths = {w: self.health(w) for w in self.workers if self.workers[w].alive()}
        for p in parts:
            h = healths.get(p["owner"])
            mine = (h or {}).get("partitions", {}).get(str(p["partition"]))
            if mine is None or mine["epoch"] != p["epoch"]:
                return None
            if mine["offset"] != source.end_offset(p["partition"]):
                return None
        return parts

    def wait_caught_up(
        self, timeout_s: float = CATCH_UP_TIMEOUT_S, every_s: float = 0.2
    ) -> list[dict[str, Any]]:
        """The partition table, once `caught_up`."""
        return wait_until(self.caught_up, "pipeline caught up", timeout_s, every_s)

    def state(self, parts: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {}
        for p in parts:
            r = call("GET", self.worker_url(p["owner"]) + f"/v1/partitions/{p['partition']}/state")
            assert r.status == 200, r
            for key, v in r.body["keys"].items():
                assert key not in out
                out[key] = (v["count"], v["sum"], v["min"], v["max"], v["last"])
        return out

    def oracle(self) -> dict[str, tuple[Any, ...]]:
        segments = self.current_source().all_segments()
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
        parts = self.wait_caught_up()
        got, want = self.state(parts), self.oracle()
        assert got == want
        return sum(v[0] for v in want.values())

    def metric(self, wid: str, name: str) -> int:
        text = call("GET", self.worker_url(wid) + "/metrics").body
        found = value(parse(str(text)), name)
        assert found is not None, f"{name} missing from {wid}'s /metrics"
        return int(found)

    def start(self) -> None:
        """Start the coordinators and wait until they are ready."""
        self.cluster.start_all()
        self.cluster.ready()

    def running(self) -> Iterator[PipelineRig]:
        """Start the coordinators, wait for a leader, yield, stop everything (a fixture body)."""
        try:
            self.start()
            yield self
        finally:
            self.stop()

    def stop(self) -> None:
        for proc in self.workers.values():
            proc.stop()
        self.cluster.stop_all()
        if self._oracle is not None:
            self._oracle.close()
