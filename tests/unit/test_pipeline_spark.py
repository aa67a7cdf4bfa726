"""The Spark computation against the run's one Spark Connect server (few jobs: ~0.3 s each)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pipeline import aggregate as aggregate_module
from pipeline.aggregate import Aggregator, BatchInput, load_transform, stage
from pipeline.source import Producer, SourceLog, generate
from pipeline.state import PartitionState, aggregate_records, merge_batch
from pipeline.store import LocalStore, S3Store

# Imported by name so pytest finds them here; test parameters then "redefine" those names,
# which is how pytest fixtures work, hence the file-wide F811 waiver.

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PARTITIONS = 4


def cheap_in_cents(df: DataFrame) -> DataFrame:
    """A sample user transform: keep prices below 100 and turn them into cents."""
    from pyspark.sql import functions as F

    return df.where(F.col("value") < 100).withColumn("value", F.col("value") * 100)


def reference(log: SourceLog, partition: int, from_offset: int) -> PartitionState:
    table = log.read(partition, from_offset).to_pydict()
    return aggregate_records(zip(table["key"], table["value"], table["offset"], strict=True))


@pytest.fixture(scope="module")
def aggregator(spark_remote: str) -> Iterator[Aggregator]:
    yield Aggregator(spark_remote)


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["union", "join"])
def test_aggregate_matches_reference_per_partition_and_from_offset(
    aggregator: Aggregator,
    tmp_path: Path,
    s3_bucket: tuple[Any, str],
    plan: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both plans of a files batch: a read per (partition, from_offset) unioned, and (past
    # UNION_READS_MAX groups) one read joined with its file -> partition table.
    monkeypatch.setattr(aggregate_module, "UNION_READS_MAX", 32 if plan == "union" else 0)
    # A space in the store path: file names must still map back to their partition.
    local = LocalStore(str(tmp_path / "store with space"))
    Producer(local, PARTITIONS).produce(generate(3000, 40, seed=1))
    Producer(local, PARTITIONS).produce(generate(2000, 40, seed=2))
    client, bucket = s3_bucket
    remote = S3Store(bucket, "r", client=client)
    Producer(remote, 2).produce(generate(500, 10, seed=3))
    local_log, remote_log = SourceLog(local, PARTITIONS), SourceLog(remote, 2)
    from_offsets = {0: 0, 1: 17, 2: 900, 3: 10_000}  # 3: nothing left to read
    inputs = [
        BatchInput(partition=p, path=stage(local, s, str(tmp_path / "stage")), from_offset=f)
        for p, f in from_offsets.items()
        for s in local_log.segments(p, f)
    ]
    # Partitions of the S3 log are staged to local files, and appear as partitions 10, 11.
    inputs += [
        BatchInput(partition=10 + p, path=stage(remote, s, str(tmp_path / "stage")), from_offset=5)
        for p in range(2)
        for s in remote_log.segments(p, 5)
    ]
    got = aggregator.aggregate(inputs)
    expected = {p: reference(local_log, p, f) for p, f in from_offsets.items()}
    expected |= {10 + p: reference(remote_log, p, 5) for p in range(2)}
    assert got == {p: s for p, s in expected.items() if s}
    assert aggregator.aggregate([]) == {}
    with pytest.raises(ValueError):
        aggregator.aggregate(inputs[:1] * 2)


@pytest.mark.spark
def test_incremental_micro_batches_equal_one_batch_job(
    aggregator: Aggregator, tmp_path: Path
) -> None:
    store = LocalStore(str(tmp_path))
    producer = Producer(store, PARTITIONS)
    log = producer.log
    states: dict[int, PartitionState] = {p: {} for p in range(PARTITIONS)}
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    for seed in range(3):  # produce, then process what is new, three times
        producer.produce(generate(1500, 30, seed=seed))
        inputs = [
            BatchInput(partition=p, path=str(store.local_path(s.key)), from_offset=offsets[p])
            for p in range(PARTITIONS)
            for s in log.segments(p, offsets[p])
        ]
        for p, batch in aggregator.aggregate(inputs).items():
            states[p], dead = merge_batch(states[p], batch)
            assert dead == {}
        offsets = {p: log.end_offset(p) for p in range(PARTITIONS)}
    everything = [str(store.local_path(s.key)) for p in range(PARTITIONS) for s in log.segments(p)]
    merged = {k: v for state in states.values() for k, v in state.items()}
    assert merged == aggregator.batch_job(everything)


@pytest.mark.spark
def test_pluggable_transform(spark_remote: str, tmp_path: Path) -> None:
    transform = load_transform(f"{__name__}:cheap_in_cents")
    store = LocalStore(str(tmp_path))
    Producer(store, 1).produce(generate(400, 8, seed=4))
    log = SourceLog(store, 1)
    table = log.read(0).to_pydict()
    rows = zip(table["key"], table["value"], table["offset"], strict=True)
    expected = aggregate_records((k, v * 100, o) for k, v, o in rows if v < 100)
    paths = [str(store.local_path(s.key)) for s in log.segments(0)]
    got = Aggregator(spark_remote, transform=transform).batch_job(paths)
    assert got == expected and 0 < len(got) < 8


def test_load_transform_rejects_bad_specs() -> None:
    for spec in ["nocolon", ":f", "m:", "pipeline.aggregate:INPUT_DDL"]:
        with pytest.raises((ValueError, TypeError)):
            load_transform(spec)
