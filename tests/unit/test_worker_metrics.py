"""A worker's /metrics is computed from what it holds: lag behind the source log as last
listed, time since each partition's state was covered by a checkpoint, and the batch
counters; a micro-batch plan lists each partition's source end even past its bounds.
Partition series name their pipeline and its own partition number, within
PIPELINE_LABELS_MAX pipeline label values."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.datapath import DataPath, Feed
from pipeline.holdings import PartitionRuntime
from pipeline.lease import Lease
from pipeline.metrics import PIPELINE_LABELS_MAX, pipeline_numbers
from pipeline.session import partition_report
from pipeline.source import Producer, SourceLog
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.store import LocalStore
from pipeline.warming import WarmCopy
from pipeline.worker import Worker
from shared.clock import FakeClock, monotonic_s
from shared.routing import SLOT_BASE
from testkit.prom import parse, value
from tests.integration.test_pipeline_spec_spark import spec_text
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
            lag = "ripple_worker_partition_lag_records"
            assert value(samples, lag, pipeline="default", partition="2") == 7
            assert value(samples, lag, pipeline="default", partition="3") is None
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


def run_of(store: LocalStore, name: str, first_slot: int, incarnation: int = 1) -> PipelineRun:
    info = PipelineInfo(
        name=name,
        incarnation=incarnation,
        first_slot=first_slot,
        partitions=4,
        spec_text=spec_text(),
        max_keys_per_partition=0,
    )
    return PipelineRun(info, store)


async def test_partition_series_name_their_pipeline_and_its_own_number(tmp_path: Path) -> None:
    clock = FakeClock(monotonic_ms=1_000_000)
    store = LocalStore(str(tmp_path / "store"))
    worker = Worker(offline_settings(tmp_path, "w1"), store, clock=clock)
    now_s = monotonic_s(clock)
    orders = run_of(store, "orders", SLOT_BASE + 8)
    held = {
        1: PartitionRuntime(epoch=1, offset=0, source_end=4, covered_at_s=now_s - 1),
        SLOT_BASE + 9: PartitionRuntime(epoch=2, offset=3, source_end=10, covered_at_s=now_s - 5),
        SLOT_BASE + 11: PartitionRuntime(epoch=2, offset=6, source_end=8, covered_at_s=now_s),
    }
    for p, rt in held.items():
        rt.run = orders if p >= SLOT_BASE else None
        worker.parts[p] = rt
    held[SLOT_BASE + 11].failures = 3
    try:
        async with TestClient(TestServer(worker.app())) as client:
            samples = parse(await (await client.get("/metrics")).text())
    finally:
        await worker.client.close()
    lag, age = (
        "ripple_worker_partition_lag_records",
        "ripple_worker_partition_checkpoint_age_seconds",
    )
    assert value(samples, lag, pipeline="default", partition="1") == 4
    assert value(samples, lag, pipeline="orders", partition="1") == 7  # slot - first_slot
    assert value(samples, lag, pipeline="orders", partition="3") == 2
    assert value(samples, age, pipeline="orders", partition="1") == 5
    assert [k for k in samples if k[0] == lag and ("partition", str(SLOT_BASE + 9)) in k[1]] == []
    assert value(samples, "ripple_worker_lag_records") == 13  # the worker-wide sum is kept
    for family, pipeline, want in (
        ("ripple_worker_pipeline_partitions", "orders", 2),
        ("ripple_worker_pipeline_partitions", "default", 1),
        ("ripple_worker_pipeline_lag_records", "orders", 9),
        ("ripple_worker_pipeline_lag_records", "default", 4),
        ("ripple_worker_pipeline_checkpoint_age_max_seconds", "orders", 5),
        ("ripple_worker_pipeline_partitions_failing", "orders", 1),
        ("ripple_worker_pipeline_partitions_failing", "default", 0),
    ):
        assert value(samples, family, pipeline=pipeline) == want, (family, pipeline)


@pytest.mark.parametrize(("extra", "stale"), [(0, False), (0, True), (1, False), (9, True)])
def test_pipeline_label_values_are_bounded_and_series_stay_distinct(
    tmp_path: Path, extra: int, stale: bool
) -> None:
    """`default` plus as many recorded pipelines as fit, the last by name under `other` by
    slot past PIPELINE_LABELS_MAX values, and an older incarnation of a held name too."""
    store = LocalStore(str(tmp_path))
    count = PIPELINE_LABELS_MAX - 1 + extra
    parts: dict[int, PartitionRuntime] = {0: PartitionRuntime(epoch=1, offset=0)}
    for i in range(count):
        run = run_of(store, f"p{i:03d}", SLOT_BASE + 4 * i)
        for n in (0, 2):
            parts[SLOT_BASE + 4 * i + n] = PartitionRuntime(epoch=1, offset=0, run=run)
    created = SLOT_BASE + 4 * count
    if stale:  # p000 dropped and created again, partitions of both incarnations held here
        again = run_of(store, "p000", created, incarnation=2)
        parts[created] = PartitionRuntime(epoch=1, offset=0, run=again)

    numbers = pipeline_numbers(parts)
    labels = {pipeline for pipeline, _ in numbers.values()}
    assert len(labels) <= PIPELINE_LABELS_MAX
    assert len(set(numbers.values())) == len(parts)  # no two partitions share a series
    assert numbers[0] == ("default", 0)
    if stale:
        assert numbers[created] == ("p000", 0)
        assert numbers[SLOT_BASE + 2] == ("other", SLOT_BASE + 2)
    else:
        assert numbers[SLOT_BASE + 2] == ("p000", 2)
    kept = count if not (extra or stale) else PIPELINE_LABELS_MAX - 2
    spilled = {"other"} if extra or stale else set()
    assert labels == {"default", *spilled} | {f"p{i:03d}" for i in range(kept)}
    last = SLOT_BASE + 4 * (count - 1) + 2
    assert numbers[last] == (("other", last) if kept < count else (f"p{count - 1:03d}", 2))
