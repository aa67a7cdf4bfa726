"""The data paths (files, arrow, direct) against the run's one Spark Connect server: each gives
the reference aggregates; arrow batches stay within their bounds; the start-up probe passes
where Spark can read and fails clearly where it cannot; and a failing micro-batch is reported
and retried without fetching its segments again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.aggregate import Aggregator
from pipeline.datapath import (
    DataPath,
    Feed,
    ProbeFailed,
    SegmentCache,
    default_data_path,
    direct_uri,
)
from pipeline.holdings import BATCH_FAILURES_REPORTED_MIN, PartitionRuntime
from pipeline.lease import Lease
from pipeline.session import partition_report
from pipeline.source import Producer, SourceLog, generate
from pipeline.state import PartitionState
from pipeline.store import LocalStore, S3Store
from pipeline.worker import Worker, WorkerSettings
from testkit.prom import parse, value
from tests.unit.test_pipeline_spark import aggregator, reference

__all__ = ["aggregator"]  # a fixture, used by name; test parameters then "redefine" it

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PARTITIONS = 4


class CountingStore:
    """A LocalStore that counts reads and, when ``remote``, hides its paths (as S3 does), so
    the files path has to stage copies."""

    def __init__(self, root: Path, *, remote: bool) -> None:
        self.inner = LocalStore(str(root))
        self.remote = remote
        self.gets: dict[str, int] = {}

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent(key, data)

    def get(self, key: str) -> bytes:
        self.gets[key] = self.gets.get(key, 0) + 1
        return self.inner.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        return self.inner.list_keys(prefix)

    def local_path(self, key: str) -> str | None:
        return None if self.remote else self.inner.local_path(key)

    def uri(self, key: str) -> str:
        return self.inner.uri(key)


def test_default_path_is_files_on_this_machine_and_arrow_elsewhere(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    assert default_data_path(store, "sc://127.0.0.1:15002") is DataPath.FILES
    assert default_data_path(store, "sc://localhost:15002/;user_id=x") is DataPath.FILES
    assert default_data_path(store, "sc://spark.example.internal:15002") is DataPath.ARROW
    assert default_data_path(store, "sc://10.0.0.7:15002") is DataPath.ARROW


def test_direct_uris_name_the_store_object(tmp_path: Path) -> None:
    local = LocalStore(str(tmp_path / "s"))
    assert direct_uri(local, "source/p00001/x.parquet") == (
        f"file://{tmp_path}/s/source/p00001/x.parquet"
    )
    s3 = S3Store("bkt", "pre", client=object())
    assert direct_uri(s3, "source/p00001/x.parquet") == "s3a://bkt/pre/source/p00001/x.parquet"


def test_segment_cache_is_bounded_and_evicts_least_recently_used() -> None:
    def table(n: int) -> pa.Table:
        return pa.table({"x": pa.array(range(n), pa.int64())})

    one = table(100).nbytes
    cache = SegmentCache(bytes_max=3 * one)
    for key in ("a", "b", "c"):
        cache.put(key, table(100))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", table(100))
    assert cache.get("b") is None and cache.get("a") is not None
    assert len(cache) == 3 and cache.nbytes <= 3 * one
    cache.drop(["a", "c", "zzz"])
    assert len(cache) == 1 and cache.nbytes == one


@pytest.mark.spark
@pytest.mark.parametrize("path", [DataPath.FILES, DataPath.ARROW, DataPath.DIRECT])
@pytest.mark.parametrize("remote", [False, True], ids=["local-store", "remote-store"])
def test_every_path_gives_the_reference_aggregates(
    aggregator: Aggregator, tmp_path: Path, path: DataPath, remote: bool
) -> None:
    if path is DataPath.DIRECT and remote:
        pytest.skip("direct on S3 needs s3a:// (hadoop-aws), which this Spark has not")
    store = CountingStore(tmp_path / "store with space", remote=remote)
    Producer(store, PARTITIONS).produce(generate(3000, 40, seed=1))
    Producer(store, PARTITIONS).produce(generate(2000, 40, seed=2))
    log = SourceLog(store, PARTITIONS)
    # files_arrow_rows_max=0: the files path scans files even for this small batch.
    feed = Feed(path, store, log, str(tmp_path / "stage"), files_arrow_rows_max=0)
    offsets = {0: 0, 1: 17, 2: 900, 3: 10_000}  # 3: nothing left to read
    batch = feed.plan(offsets)
    assert set(batch.ends) == {0, 1, 2}
    assert (batch.table is not None) == (path is DataPath.ARROW)
    if path is not DataPath.ARROW:
        # Only the segment the offset falls inside is filtered; whole segments are not.
        assert [i.from_offset for i in batch.inputs if i.partition == 1] == [17, 0]
    result = feed.run(aggregator, batch)
    for p in (0, 1, 2):
        assert batch.ends[p] == log.end_offset(p)
        assert result[p] == reference(log, p, offsets[p])
    assert 3 not in result
    feed.done(batch)
    if feed.stages_copies:
        assert not any((tmp_path / "stage").rglob("*.parquet")), "staged copies outlive a batch"


@pytest.mark.spark
def test_arrow_batches_stay_within_rows_and_bytes_and_catch_up(
    aggregator: Aggregator, tmp_path: Path
) -> None:
    store = LocalStore(str(tmp_path / "store"))
    for seed in range(6):  # six segments per partition
        Producer(store, 2).produce(generate(400, 20, seed=seed))
    log = SourceLog(store, 2)
    feed = Feed(DataPath.ARROW, store, log, str(tmp_path / "stage"), arrow_rows_max=500)
    offsets = {0: 0, 1: 0}
    state: dict[int, PartitionState] = {0: {}, 1: {}}
    batches = 0
    while any(offsets[p] < log.end_offset(p) for p in offsets):
        batch = feed.plan(offsets)
        assert batch.table is not None
        # Never more than the bound, unless one segment alone exceeds it.
        assert batch.rows <= 500 or len(batch.keys) == 1
        # Round robin: a bounded batch still moves every partition that is behind.
        behind = {p for p in offsets if offsets[p] < log.end_offset(p)}
        assert set(batch.ends) == behind or len(batch.keys) == 1
        for p, part in feed.run(aggregator, batch).items():
            for key, ks in part.items():
                old = state[p].get(key)
                state[p][key] = ks if old is None else _merge(old, ks)
        feed.done(batch)
        offsets.update(batch.ends)
        batches += 1
        assert batches < 50
    assert batches >= 4  # ~1200 rows per partition in batches of at most 500
    for p in (0, 1):
        assert state[p] == reference(log, p, 0)
    assert len(feed.cache) == 0  # consumed segments leave the cache


def _merge(a: Any, b: Any) -> Any:
    from pipeline.state import merge

    return merge(a, b)


@pytest.mark.spark
@pytest.mark.parametrize("path", [DataPath.FILES, DataPath.ARROW, DataPath.DIRECT])
def test_probe_passes_where_spark_reads(
    aggregator: Aggregator, tmp_path: Path, path: DataPath
) -> None:
    store = CountingStore(tmp_path / "store", remote=path is DataPath.FILES)
    feed = Feed(path, store, SourceLog(store, PARTITIONS), str(tmp_path / "stage"))
    feed.probe(aggregator, "w1")
    feed.probe(aggregator, "w1")  # the same worker id again reuses its probe object
    assert store.inner.list_keys("probes/") == ["probes/w1.parquet"]


@pytest.mark.spark
def test_probe_refuses_a_path_spark_cannot_read(
    aggregator: Aggregator, s3_bucket: tuple[Any, str], tmp_path: Path
) -> None:
    client, bucket = s3_bucket
    store = S3Store(bucket, "probe", client=client)
    feed = Feed(DataPath.DIRECT, store, SourceLog(store, PARTITIONS), str(tmp_path / "stage"))
    with pytest.raises(ProbeFailed) as info:
        feed.probe(aggregator, "w9")
    message = str(info.value)
    assert "'direct' data path" in message and f"s3a://{bucket}/probe/probes/w9.parquet" in message


class Switch:
    """A transform that makes the Spark job fail (a missing column, an analysis error the
    server raises) while ``broken``."""

    def __init__(self) -> None:
        self.broken = True

    def __call__(self, df: DataFrame) -> DataFrame:
        return df.select("no_such_column") if self.broken else df


@pytest.mark.spark
@pytest.mark.parametrize("path", [DataPath.FILES, DataPath.ARROW])
async def test_failing_batches_are_reported_and_retried_without_refetching(
    spark_remote: str, tmp_path: Path, path: DataPath
) -> None:
    store = CountingStore(tmp_path / "store", remote=True)
    Producer(store, PARTITIONS).produce(generate(800, 20, seed=3))
    log = SourceLog(store, PARTITIONS)
    switch = Switch()
    settings = WorkerSettings(
        coordinators=("http://127.0.0.1:9",),
        worker_id="w1",
        listen="127.0.0.1:0",
        spark_remote=spark_remote,
        staging_dir=str(tmp_path / "stage"),
        data_path=path.value,
    )
    worker = Worker(settings, store, switch)
    processor = worker.processor
    worker.total_partitions, processor.source = PARTITIONS, log
    processor.aggregator = Aggregator(spark_remote, switch)
    processor.feed = Feed(path, store, log, processor.staging, files_arrow_rows_max=0)
    worker.lease = Lease(lease_ms=600_000).renewed(worker.clock.monotonic_ms())
    for p in range(PARTITIONS):
        rt = PartitionRuntime(epoch=1)
        rt.loaded.set()
        worker.parts[p] = rt
        worker.holdings.gates.host(p, 1)
    try:
        async with TestClient(TestServer(worker.app())) as client:
            for attempt in range(BATCH_FAILURES_REPORTED_MIN):
                assert "failures" not in partition_report(worker.parts[0]).to_json()
                with pytest.raises(Exception, match="no_such_column"):
                    await processor.process_once()
                if attempt == 0:
                    fetched_first = dict(store.gets)
            report = partition_report(worker.parts[0])
            assert report.failures == BATCH_FAILURES_REPORTED_MIN
            assert "no_such_column" in report.error
            health = await (await client.get("/v1/health")).json()
            assert health["partitions"]["0"]["failures"] == BATCH_FAILURES_REPORTED_MIN
            assert health["stats"]["batch_failures"] == BATCH_FAILURES_REPORTED_MIN
            metrics = parse(await (await client.get("/metrics")).text())
            assert value(metrics, "ripple_worker_partitions_failing") == PARTITIONS

            switch.broken = False
            assert await processor.process_once() == 800
            # The retries and the success fetched nothing the first try had not fetched.
            segments = [k for k in store.gets if k.startswith("source/")]
            assert len(segments) == PARTITIONS and store.gets == fetched_first
            assert worker.stats["segments_fetched"] == len(segments)
            # No failure fields once a batch succeeds (the input rate comes once measured).
            report = partition_report(worker.parts[0]).to_json().keys() - {"rate"}
            assert report == {"epoch", "offset", "source_end"}
            assert partition_report(worker.parts[0]).source_end == worker.parts[0].offset
            metrics = parse(await (await client.get("/metrics")).text())
            assert value(metrics, "ripple_worker_partitions_failing") == 0
            for p in range(PARTITIONS):
                assert worker.parts[p].state == reference(log, p, 0)
    finally:
        await worker.client.close()


@pytest.mark.spark
def test_files_path_sends_small_batches_as_arrow(aggregator: Aggregator, tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    Producer(store, 2).produce(generate(300, 10, seed=4))
    log = SourceLog(store, 2)
    offsets = {0: 0, 1: 0}
    small = Feed(DataPath.FILES, store, log, str(tmp_path / "stage"), files_arrow_rows_max=300)
    large = Feed(DataPath.FILES, store, log, str(tmp_path / "stage"), files_arrow_rows_max=299)
    a, b = small.plan(offsets), large.plan(offsets)
    assert a.table is not None and not a.inputs
    assert b.table is None and len(b.inputs) == 2
    assert small.run(aggregator, a) == large.run(aggregator, b)


@pytest.mark.spark
def test_files_schema_is_the_ddl(aggregator: Aggregator) -> None:
    from pipeline.aggregate import FILES_DDL, _files_schema

    assert aggregator.spark.createDataFrame([], FILES_DDL).schema == _files_schema()


@pytest.mark.spark
def test_arrow_path_renews_its_session_and_keeps_the_results(
    spark_remote: str, tmp_path: Path
) -> None:
    store = LocalStore(str(tmp_path / "store"))
    Producer(store, 2).produce(generate(200, 10, seed=5))
    log = SourceLog(store, 2)
    agg = Aggregator(spark_remote, own_session=True)
    agg.arrow_batches_per_session_max = 2
    feed = Feed(DataPath.ARROW, store, log, str(tmp_path / "stage"))
    batch = feed.plan({0: 0, 1: 0})
    try:
        results = [feed.run(agg, batch) for _ in range(5)]
        # Released sessions free what the server kept for them (local relations over 1 MiB).
        assert agg.sessions_renewed == 2
        assert all(r == results[0] for r in results)
        assert results[0][0] == reference(log, 0, 0)
    finally:
        agg.close()
