"""What a worker does when its store or its staging disk fails: S3 calls retried by the
client with backoff and jitter, bounded; what still fails counted by operation and named as
the micro-batch's fault (`store`, `staging_disk`, never a Spark fault, so no new session); a
checkpoint round the store fails is logged, counted and retried by the next round; a staged
copy the disk could not hold leaves nothing behind."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
from pathlib import Path
from typing import Any, cast

import pytest

from pipeline.aggregate import Aggregator, stage
from pipeline.datapath import DataPath, Feed
from pipeline.holdings import BATCH_FAILURES_REPORTED_MIN
from pipeline.lease import Lease
from pipeline.processing import BATCH_RETRY_PAUSE_S_MAX, retry_pause_s
from pipeline.source import Segment, SourceLog
from pipeline.spark_link import BatchFault, classify
from pipeline.store import (
    S3_ATTEMPTS_MAX,
    CountedStore,
    LocalStore,
    S3Store,
    StoreError,
    StoreKeyMissing,
    s3_client_config,
)
from testkit.faults.s3_proxy import Fault, S3FaultProxy
from testkit.prom import parse, value
from testkit.wait import wait_until_async
from tests.unit.test_pipeline_worker import holding_p2

SEGMENT = Segment(partition=0, first_offset=0, count=2, key="log/p0/seg-0")


def test_the_s3_client_retries_with_jitter_a_bounded_number_of_times() -> None:
    config = s3_client_config()
    # "standard": exponential backoff with full jitter on throttling, 5xx, resets, timeouts.
    assert config.retries == {"mode": "standard", "max_attempts": S3_ATTEMPTS_MAX}
    assert config.connect_timeout is not None and config.connect_timeout <= 10
    assert config.read_timeout is not None and config.read_timeout <= 60


def test_a_store_answering_slow_down_is_retried_through(
    moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> None:
    with S3FaultProxy(moto_endpoint, seed=39) as proxy:
        store = S3Store(s3_bucket[1], "retried", endpoint_url=proxy.url)
        assert store.put_if_absent("a", b"one")
        # Every request refused for a moment: the call waits it out in its retries.
        proxy.inject(Fault.SLOW_DOWN, duration_s=0.3)
        assert store.get("a") == b"one"
        assert proxy.counts()[Fault.SLOW_DOWN] >= 1


def test_counted_store_counts_failures_by_operation_not_missing_keys(tmp_path: Path) -> None:
    class Down(LocalStore):
        def put_if_absent(self, key: str, data: bytes) -> bool:
            raise StoreError("503 SlowDown")

    store = CountedStore(Down(str(tmp_path / "s")))
    with pytest.raises(StoreError):
        store.put_if_absent("k", b"x")
    with pytest.raises(StoreKeyMissing):
        store.get("absent")  # an answer, not a failure
    assert store.list_keys("") == []
    assert store.errors == {"put": 1, "get": 0, "list": 0}


def test_store_and_staging_disk_faults_are_named_apart_from_sparks() -> None:
    try:
        try:
            raise OSError(errno.ECONNRESET, "reset")
        except OSError as exc:
            raise StoreError("get s3://b/k: reset") from exc
    except StoreError as exc:
        assert classify(exc) is BatchFault.STORE
        assert classify(exc, planning=True) is BatchFault.STORE
    assert classify(OSError(errno.ENOSPC, "No space left")) is BatchFault.STAGING_DISK
    assert classify(ValueError("bad segment"), planning=True) is BatchFault.PLAN
    # A refused connection is a socket's error, not a disk's: Spark unreachable or a job.
    assert classify(ConnectionRefusedError(errno.ECONNREFUSED, "refused")) is not (
        BatchFault.STAGING_DISK
    )
    assert not BatchFault.STORE.needs_new_session
    assert not BatchFault.STAGING_DISK.needs_new_session


def test_a_staged_copy_the_disk_cannot_hold_leaves_nothing(tmp_path: Path) -> None:
    class Failing(LocalStore):
        def local_path(self, key: str) -> str | None:
            return None  # stage a copy, as from S3

        def get(self, key: str) -> bytes:
            raise StoreError("503 SlowDown")

    staging = tmp_path / "stage"
    with pytest.raises(StoreError):
        stage(Failing(str(tmp_path / "s")), SEGMENT, str(staging))
    left = [f for _, _, files in os.walk(staging) for f in files]
    assert left == []


async def test_a_checkpoint_round_the_store_fails_is_retried_by_the_next(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker, store = holding_p2(tmp_path, {})
    worker.lease = Lease(lease_ms=60_000).renewed(worker.clock.monotonic_ms())
    try:
        store.down = True
        with caplog.at_level(logging.WARNING, logger="pipeline.checkpointing"):
            await worker.checkpointer.checkpoint_and_report()  # does not raise
        assert "checkpoint round failed, the next one retries" in caplog.text
        assert worker.stats["checkpoint_failures"] == 1
        assert worker.stats["checkpoints"] == 0
        samples = parse(worker.metrics.render().decode())
        assert value(samples, "ripple_worker_store_errors_total", op="put") == 1
        assert value(samples, "ripple_worker_checkpoint_failures_total") == 1
        assert worker.health()["store_errors"] == {"put": 1, "get": 0, "list": 0}

        store.down = False
        entries = await worker.checkpointer.write_checkpoints()
        assert [(e.partition, e.epoch, e.offset) for e in entries] == [(2, 3, 5)]
        assert worker.stats["checkpoints"] == 1
    finally:
        await worker.client.close()


def test_a_failing_batch_is_retried_after_a_capped_pause_with_jitter() -> None:
    rng = random.Random(39)
    first = [retry_pause_s(0.5, 1, rng) for _ in range(50)]
    assert all(0.5 <= p <= 1.0 for p in first)  # the doubled interval, half of it at least
    assert len(set(first)) > 1  # jittered: workers failing together do not retry in step
    late = [retry_pause_s(0.5, 30, rng) for _ in range(50)]
    assert all(BATCH_RETRY_PAUSE_S_MAX / 2 <= p <= BATCH_RETRY_PAUSE_S_MAX for p in late)


async def test_a_store_outage_fails_batches_as_store_and_reports_them_failing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker, store = holding_p2(tmp_path, {})
    worker.lease = Lease(lease_ms=60_000).renewed(worker.clock.monotonic_ms())
    processor = worker.processor
    # Through the worker's own store, as `Processor.start` builds them: the counted one.
    processor.source = SourceLog(processor.store, 8)
    processor.feed = Feed(DataPath.FILES, processor.store, processor.source, processor.staging)
    # Never called: planning fails before any Spark job, and a store fault needs no session.
    processor.aggregator = cast(Aggregator, object())
    stopped = asyncio.Event()
    store.down = True
    try:
        with caplog.at_level(logging.WARNING, logger="pipeline.processing"):
            loop = asyncio.create_task(processor.loop(stopped))
            await wait_until_async(
                lambda: processor.failed_batches["store"] >= BATCH_FAILURES_REPORTED_MIN,
                "three failed batches",
                timeout_s=30.0,
            )
            stopped.set()
            await asyncio.wait_for(loop, 10.0)
        assert worker.holdings.failing() == [2]
        assert "503 ServiceUnavailable" in worker.parts[2].error
        assert not processor.link.lost  # the store's fault never costs the Spark session
        assert "micro-batch failed (store): 503 ServiceUnavailable" in caplog.text
        assert "Traceback" not in caplog.text
        assert worker.store.errors["list"] >= BATCH_FAILURES_REPORTED_MIN
    finally:
        stopped.set()
        await worker.client.close()
