"""The peer of the `state` benchmark: a Structured Streaming query with the RocksDB state store
provider (changelog checkpointing on, as a tuned user runs it) doing a recorded pipeline's
count/sum per key in update mode over that pipeline's own segment files.

It is bench/streaming_query.py's query (its runs, progress ledger and bounded stops are
reused) with another state store, another aggregation, another output mode and a fixed
trigger: update mode appends each batch's changed keys to the memory sink, so a key's newest
figures are its largest count there. The memory sink recovers from a checkpoint in complete
mode only, so this query runs once, from the benchmark's start to its end: it reads its own
input directory, into which the benchmark links the pipeline's segments (`feed`) when the
query's turn comes, and between turns it finds nothing new (one listing per trigger).
Invariant: the RocksDB provider and changelog checkpointing are set on the query's own
session before it starts, so every batch of its checkpoint is RocksDB's; a segment is linked
once, so the query takes every row once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.streaming_query import SINK_NAME, StreamingAggregation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["ROCKSDB_CONF", "TRIGGER", "RocksDBAggregation", "dir_files"]

# The workers' micro-batch interval (pipeline.worker.BATCH_INTERVAL_S_DEFAULT): both systems
# look for new input as often.
TRIGGER = "500 milliseconds"

ROCKSDB_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


def dir_files(root: str) -> dict[str, int]:
    """Every file under `root` (relative path -> bytes); none when it does not exist."""
    out: dict[str, int] = {}
    base = Path(root)
    for dirpath, _, names in os.walk(base):
        for name in names:
            path = Path(dirpath) / name
            try:
                out[str(path.relative_to(base))] = path.stat().st_size
            except FileNotFoundError:  # a temp file renamed between the listing and stat
                continue
    return out


class RocksDBAggregation(StreamingAggregation):
    """`count(*)` as `count_name` and `sum(value_col)` as `sum_name` per `key_col` over the
    Parquet files linked under `input_dir` (schema `ddl`), RocksDB state in
    `state_partitions` stores, update mode."""

    def __init__(
        self,
        spark_remote: str,
        input_dir: Path,
        checkpoint_dir: str,
        *,
        ddl: str,
        key_col: str,
        value_col: str,
        count_name: str,
        sum_name: str,
        sink_suffix: str,
        state_partitions: int,
    ) -> None:
        # The glob names the partition directories, each listed as one directory (see
        # bench/structured_streaming.py).
        super().__init__(spark_remote, f"{input_dir}/p*", checkpoint_dir)
        self.input_dir = input_dir
        input_dir.mkdir(parents=True, exist_ok=True)
        for name, value in ROCKSDB_CONF.items():
            self.spark.conf.set(name, value)
        # As many state stores as the pipeline has partitions, as a user tunes it on a small
        # machine: Spark's default, 200, is 200 RocksDB instances and tasks per micro-batch.
        self.spark.conf.set("spark.sql.shuffle.partitions", str(state_partitions))
        self.ddl = ddl
        self.key_col, self.value_col = key_col, value_col
        self.count_name, self.sum_name = count_name, sum_name
        self.sink = f"{SINK_NAME}_{sink_suffix}"

    def _aggregates(self) -> DataFrame:
        from pyspark.sql import functions as F

        rows = self.spark.readStream.format("parquet").schema(self.ddl).load(self.source_glob)
        return rows.groupBy(self.key_col).agg(
            F.count(F.lit(1)).alias(self.count_name), F.sum(self.value_col).alias(self.sum_name)
        )

    def _start(self, available_now: bool) -> StreamingQuery:
        if self._query is not None or available_now:
            raise RuntimeError("this query runs once, at its fixed trigger")
        writer = (
            self._aggregates()
            .writeStream.format("memory")
            .queryName(self.sink)
            .outputMode("update")
            .option("checkpointLocation", self.checkpoint_dir)
        )
        query = writer.trigger(processingTime=TRIGGER).start()
        self._query = query
        return query

    def feed(self, segments: dict[str, Path]) -> int:
        """Link each segment file not linked yet into the query's input directory, under
        `name` (its partition directory and file name); returns how many were new."""
        new = 0
        for name, path in segments.items():
            target = self.input_dir / name
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)  # segments never change: a link is the same bytes
            new += 1
        return new

    def figures(self, key: str) -> tuple[int, float] | None:
        """`key`'s newest (count, sum) as the sink shows it now, or None."""
        from pyspark.sql import functions as F

        rows: list[Any] = (
            self.spark.table(self.sink)
            .where(F.col(self.key_col) == key)
            .orderBy(F.col(self.count_name).desc())
            .limit(1)
            .collect()
        )
        if not rows:
            return None
        return int(rows[0][self.count_name]), float(rows[0][self.sum_name])

    def checkpoint_files(self) -> dict[str, int]:
        """The query's checkpoint directory now: relative path -> bytes."""
        return dir_files(self.checkpoint_dir)
