"""A worker's /metrics is computed from what it holds: lag behind the source log as last
listed, time since each partition's state was covered by a checkpoint, and the batch
counters; a micro-batch plan lists each partition's source end even past its bounds."""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from pipeline.datapath import DataPath, Feed
from pipeline.holdings import PartitionRuntime
from pipeline.lease import Lease
from pipeline.session import partition_report
from pipeline.source import Producer, SourceLog
from pipeline.store import LocalStore
from pipeline.warming import WarmCopy
from pipeline.worker import Worker
from shared.clock import FakeClock, monotonic_s
from testkit.prom import parse, value
from tests.unit.test_pipeline_worker import offline_settings


async def test_lag_and_checkpoint_age_come_from_the_partitions_held(tmp_path: Path) -> None:
    clock = FakeClock(monotonic_ms=1_000_000)
    store = LocalStore(str(tmp_path / "store"))
    worker = Worker(offline_settings(tmp_path, "w1"), store, clock=clock)
    worker.lease = Lease(lease_ms=60_000).renewed(worker.clock.monotonic_ms())
    now_s = monotonic_s(clock)
    behind = PartitionRuntime(epoch=3, offset=5, source_end=12, covered_at_s=now_s - 42)
    # Hosted, not listed yet: no lag known.
    unlisted = PartitionRuntime(epoch=1, offset=7, covered_at_s=now_s - 2)
    for p, rt in ((2, behind), (3, unlisted)):
        rt.loaded.set()
        worker.parts[p] = rt
        worker.holdings.gates.host(p, rt.epoch)
    worker.stats["batches"], worker.stats["batch_failures"] = 9, 2
    try:
        async with TestClient(TestServer(worker.app())) as client:
            samples = parse(await (await client.get("/metrics")).text())
            assert value(samples, "ripple_worker_lag_records") == 7
            assert value(samples, "ripple_worker_partition_lag_records", partition="2") == 7
            assert value(samples, "ripple_worker_partition_lag_records", partition="3") is None
            assert value(samples, "ripple_worker_checkpoint_age_max_seconds") == 42
            assert value(samples, "ripple_worker_batches_total") == 9
            assert value(samples, "ripple_worker_batch_failures_total") == 2
            assert value(samples, "ripple_worker_partitions_open") == 2
            assert partition_report(behind).source_end == 12
            assert "source_end" not in partition_report(unlisted).to_json()

            await worker.checkpointer.write_checkpoints()  # covers both partitions' state as of now
            clock.advance(1_500)
            samples = parse(await (await client.get("/metrics")).text())
            assert value(samples, "ripple_worker_checkpoint_age_max_seconds") == 1.5
    finally:
        await worker.client.close()


def test_a_bounded_plan_still_lists_each_partitions_source_end(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    source = SourceLog(store, 1)
    for i in range(3):  # three segments in partition 0 (one partition: every key lands there)
        Producer(store, 1).produce([(f"K{i}", float(i)), (f"K{i}b", 1.0)])
    feed = Feed(DataPath.FILES, store, source, str(tmp_path / "stage"), segments_max=1)
    batch = feed.plan({0: 0})
    assert batch.ends == {0: 2}  # one segment of two records fits the bound
    assert batch.heads == {0: 6}  # the log's end, all three segments
    assert feed.plan({0: 6}).heads == {0: 6}  # caught up: the end is the offset itself


async def test_batch_seconds_are_exported_per_stage_as_they_grow(tmp_path: Path) -> None:
    # The processing loop adds to `processor.batch_seconds` in place; the scrape reads the
    # same dict, so each stage's counter is the time spent so far.
    worker = Worker(offline_settings(tmp_path, "w1"), LocalStore(str(tmp_path / "store")))
    try:
        async with TestClient(TestServer(worker.app())) as client:
            samples = parse(await (await client.get("/metrics")).text())
            for stage in ("plan", "spark", "merge"):
                assert value(samples, "ripple_worker_batch_seconds_total", stage=stage) == 0
            worker.processor.batch_seconds["spark"] += 1.5
            worker.processor.batch_seconds["merge"] += 0.25
            samples = parse(await (await client.get("/metrics")).text())
            assert value(samples, "ripple_worker_batch_seconds_total", stage="plan") == 0
            assert value(samples, "ripple_worker_batch_seconds_total", stage="spark") == 1.5
            assert value(samples, "ripple_worker_batch_seconds_total", stage="merge") == 0.25
    finally:
        await worker.client.close()


async def test_warm_copies_are_counted_by_outcome_and_held(tmp_path: Path) -> None:
    worker = Worker(offline_settings(tmp_path, "w1"), LocalStore(str(tmp_path / "store")))
    worker.warming.copies[4] = WarmCopy(migration_id="m1", asked_at_s=monotonic_s(worker.clock))
    worker.warming.stats.update(started=3, used=1, dropped=1)
    try:
        async with TestClient(TestServer(worker.app())) as client:
            samples = parse(await (await client.get("/metrics")).text())
            assert value(samples, "ripple_worker_warm_copies_held") == 1
            for outcome, count in (("started", 3), ("used", 1), ("dropped", 1)):
                got = value(samples, "ripple_worker_warm_copy_outcomes_total", outcome=outcome)
                assert got == count, outcome
    finally:
        await worker.client.close()
