"""A micro-batch whose Spark job hangs, on the real (session-wide) Spark Connect server: past
spark_job_timeout_s the worker interrupts it, merges nothing, moves no offset, and the retry
on a new session computes the same batch exactly. The job hangs in a Python UDF that sleeps
(no CPU spent); only the interrupt ends it."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pipeline.aggregate import Aggregator
from pipeline.datapath import DataPath, Feed
from pipeline.processing import PROBE_CANCEL_WAIT_S
from pipeline.source import Producer, SourceLog, generate
from pipeline.spark_link import BatchFault, SparkJobTimeout
from pipeline.store import LocalStore
from pipeline.worker import Worker
from tests.unit.test_pipeline_spark import reference
from tests.unit.test_pipeline_worker import offline_settings
from tests.unit.test_spark_faults import hosting

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PARTITIONS = 2
RECORDS = 60
JOB_TIMEOUT_S = 8.0
SLEEP_S = 3600  # the UDF's sleep: far past any bound of this test


class Hang:
    """A transform whose rows go through a sleeping Python UDF while `on`."""

    def __init__(self) -> None:
        self.on = True

    def __call__(self, df: DataFrame) -> DataFrame:
        if not self.on:
            return df
        from pyspark.sql import functions as F

        sleepy = F.udf(lambda v: (time.sleep(SLEEP_S), v)[1], "double")
        return df.withColumn("value", sleepy("value"))


@pytest.mark.spark
async def test_a_hung_job_is_interrupted_and_retried_exactly(
    spark_remote: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalStore(str(tmp_path / "store"))
    Producer(store, PARTITIONS).produce(generate(RECORDS, 6, seed=5))
    log = SourceLog(store, PARTITIONS)
    hang = Hang()
    settings = dataclasses.replace(
        offline_settings(tmp_path, "w1"),
        spark_remote=spark_remote,
        data_path=DataPath.ARROW.value,
        spark_job_timeout_s=JOB_TIMEOUT_S,
    )
    worker = Worker(settings, store, hang)
    processor = worker.processor
    worker.total_partitions, processor.source = PARTITIONS, log
    aggregator = Aggregator(spark_remote, hang, own_session=True)
    processor.aggregator = aggregator
    processor.feed = Feed(DataPath.ARROW, store, log, processor.staging)
    processor.warming = None
    hosting(worker, range(PARTITIONS), epoch=1)
    hung_session = aggregator.spark
    try:
        began = time.monotonic()
        with pytest.raises(SparkJobTimeout):
            await processor.process_once()
        # Bounded: the timeout, then the interrupt's own bounded wait; and the interrupt
        # really ended the job (its call returned), so no thread was left behind.
        assert time.monotonic() - began < JOB_TIMEOUT_S + 2 * PROBE_CANCEL_WAIT_S
        assert "did not return" not in caplog.text
        assert "ran past spark_job_timeout_s=8" in caplog.text
        assert processor.failed_batches[BatchFault.SPARK_TIMEOUT.value] == 1
        assert [(rt.offset, rt.state) for rt in worker.parts.values()] == [(0, {}), (0, {})]

        hang.on = False
        assert await processor.process_once() == RECORDS
        assert aggregator.spark is not hung_session  # the retry ran on a new session
        assert worker.stats["spark_reconnects"] == 1 and not processor.link.lost
        for p in range(PARTITIONS):
            assert worker.parts[p].state == reference(log, p, 0)
    finally:
        aggregator.close()
        await worker.client.close()
