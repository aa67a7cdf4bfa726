"""A running pipeline for the recovery and pipeline benchmarks: three coordinator processes,
`ripple worker` processes on ONE local Spark Connect server, a local-directory store and a
producer. Same shape as tests/integration/test_pipeline.py, without pytest.

Every process (coordinators, workers, the Spark JVM) is tracked by PID and ended by it in
`close()`; every wait is bounded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Protocol

from bench.harness import Cluster, Proc, call, free_ports, wait_until
from pipeline.aggregate import Aggregator, stage
from pipeline.source import Producer, SourceLog
from pipeline.spark_server import SparkConnectServer
from pipeline.store import open_store
from ripple.launch import worker_argv

PARTITIONS = 8
# Short timeouts so a benchmark run takes seconds, not minutes; reported with the figures.
SETTINGS: dict[str, Any] = {
    "total_partitions": PARTITIONS,
    "min_cluster_size": 3,
    "heartbeat_interval_s": 0.3,
    "suspect_after_s": 1.0,
    "lease_s": 1.5,
    "heartbeat_timeout_s": 3.0,
    "checkpoint_interval_s": 1.0,
}
BATCH_INTERVAL_S = 0.2
CATCH_UP_TIMEOUT_S = 180.0


class SparkLike(Protocol):
    def start(self) -> str: ...

    def stop(self) -> None: ...


class Rig:
    def __init__(
        self,
        root: Path,
        settings: dict[str, Any] | None = None,
        *,
        spark: SparkLike | None = None,
        worker_args: tuple[str, ...] = (),
    ) -> None:
        self.root = root
        (root / "cluster").mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(
            root / "cluster", store=f"file://{root / 'store'}", **(settings or SETTINGS)
        )
        # A local Spark Connect server unless given another (say tests/spark_cluster.py's).
        self.spark: SparkLike = spark or SparkConnectServer(str(root / "spark"))
        self.worker_args = worker_args
        self.spark_url = ""
        self.store_uri = f"file://{root / 'store'}"
        self.store = open_store(self.store_uri)
        self.source = SourceLog(self.store, PARTITIONS)
        self.producer = Producer(self.store, PARTITIONS)
        self.workers: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}

    def start(self) -> None:
        self.spark_url = self.spark.start()
        self.cluster.start_all()
        self.cluster.ready()

    def close(self) -> None:
        for proc in self.workers.values():
            proc.stop()
        self.cluster.stop_all()
        self.spark.stop()

    def start_worker(self, wid: str, batch_interval_s: float = BATCH_INTERVAL_S) -> Proc:
        port = free_ports(1)[0]
        argv = worker_argv(
            worker_id=wid,
            listen=f"127.0.0.1:{port}",
            store=self.store_uri,
            spark_remote=self.spark_url,
            coordinators=[s.url for s in self.cluster.specs],
            batch_interval_s=batch_interval_s,
            extra=self.worker_args,
        )
        proc = Proc(argv, self.root / "logs" / f"{wid}.log", env={"PYSPARK_PYTHON": sys.executable})
        self.workers[wid], self.ports[wid] = proc, port
        return proc

    def worker_health(self, wid: str) -> dict[str, Any] | None:
        try:
            r = call("GET", f"http://127.0.0.1:{self.ports[wid]}/v1/health", timeout_s=3.0)
        except OSError:
            return None
        return r.body if r.status == 200 else None

    def table(self) -> list[dict[str, Any]]:
        leader = self.cluster.leader()
        r = self.cluster.get(leader, "/v1/partitions?consistent=true")
        parts: list[dict[str, Any]] = r.body["partitions"]
        return parts

    def all_online_without(self, gone: str | None) -> bool:
        parts = self.table()
        return all(p["status"] == "online" and p["owner"] != gone for p in parts)

    def caught_up(self) -> bool:
        """Every partition ONLINE, and its owner has processed the whole source log."""
        parts = self.table()
        if any(p["status"] != "online" for p in parts):
            return False
        healths = {w: self.worker_health(w) for w, proc in self.workers.items() if proc.alive()}
        for p in parts:
            mine = (healths.get(p["owner"]) or {}).get("partitions", {}).get(str(p["partition"]))
            if mine is None or mine["epoch"] != p["epoch"]:
                return False
            if mine["offset"] != self.source.end_offset(p["partition"]):
                return False
        return True

    def wait_caught_up(self, timeout_s: float = CATCH_UP_TIMEOUT_S) -> float:
        t0 = time.monotonic()
        wait_until(self.caught_up, "pipeline caught up", timeout_s, 0.05)
        return time.monotonic() - t0

    def ends(self) -> dict[int, int]:
        """Each partition's end offset now: where the next round's input will begin."""
        return {p: self.source.end_offset(p) for p in range(PARTITIONS)}

    def input_paths(self, since: dict[int, int] | None = None) -> list[str]:
        """Every segment's file, or (given `since`, from `ends`) those appended since."""
        staging = str(self.root / "staging")
        return [
            stage(self.store, seg, staging)
            for p in range(PARTITIONS)
            for seg in self.source.segments(p, (since or {}).get(p, 0))
        ]

    def batch_job_arrow_s(self, since: dict[int, int] | None = None) -> tuple[float, int]:
        """Seconds for reading every segment (or those appended `since`) here (pyarrow,
        through the store) and one Aggregator.batch_job_table over the rows: the batch job
        on a Spark whose executors cannot see the store; and the row count."""
        import pyarrow as pa

        agg = Aggregator(self.spark_url)
        try:
            warm = self.source.read(0, 0).slice(0, 1000).select(["key", "value", "offset"])
            agg.batch_job_table(warm)  # warm the session so both sides start with one
            t0 = time.perf_counter()
            table = pa.concat_tables(
                self.source.read(p, (since or {}).get(p, 0)).select(["key", "value", "offset"])
                for p in range(PARTITIONS)
            )
            out = agg.batch_job_table(table)
            elapsed = time.perf_counter() - t0
        finally:
            agg.close()
        return elapsed, sum(v.count for v in out.values())

    def batch_job_s(self, since: dict[int, int] | None = None) -> tuple[float, int]:
        """Seconds for one Aggregator.batch_job over every input file (or those appended
        `since`), and the row count."""
        paths = self.input_paths(since)
        agg = Aggregator(self.spark_url)
        try:
            agg.batch_job(paths[:1])  # warm the session so both sides start with one
            t0 = time.perf_counter()
            out = agg.batch_job(paths)
            elapsed = time.perf_counter() - t0
        finally:
            agg.close()
        return elapsed, sum(v.count for v in out.values())
