"""The peer of the `structured_streaming` benchmark: one Spark Structured Streaming query doing
the pipeline's aggregation over the source log's own segment files, on a Spark Connect server.

The query reads every segment of the store (the glob `source/p*`, its partition directories,
listed again on every trigger; the store's temp files have hidden names, which Spark skips),
groups by key (count, sum, min, max and last = `max_by(value, offset)`, as
`pipeline.aggregate` does) and writes to Spark's memory sink in complete mode under a
checkpoint directory of its own.
Complete mode because the memory sink recovers from a checkpoint in no other mode, and the
benchmark stops and restarts the query between its phases.

Invariant: at most one run of the query is active, `stop` and `close` end it, and every
wait is bounded (the session's `spark.sql.streaming.stopTimeout` bounds a stop). Rows and
micro-batches are counted from the query's progress reports (`Ledger`), each batch once, up
to the stop of each run, so `rows_processed` is every input row the query has taken.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.aggregate import INPUT_DDL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["Batch", "Ledger", "StreamingAggregation", "phase_means"]

SINK_NAME = "ripple_bench_aggregates"
STOP_TIMEOUT_S = 60.0
AVAILABLE_NOW_TIMEOUT_S = 300  # awaitTermination takes whole seconds
STARTED_TIMEOUT_S = 120.0
POLL_S = 0.05
# Progress phases (Spark's durationMs names) kept per batch, seconds; `trigger` is the whole
# batch, the others its parts. `state_commit` is the state store's commit (its operator's
# commitTimeMs), inside `add_batch`.
PHASES = {
    "trigger": "triggerExecution",
    "latest_offset": "latestOffset",
    "planning": "queryPlanning",
    "get_batch": "getBatch",
    "add_batch": "addBatch",
    "wal_commit": "walCommit",
    "commit_offsets": "commitOffsets",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """One micro-batch that took input rows, as its progress report tells it."""

    rows: int
    seconds: dict[str, float]  # PHASES' names, plus "state_commit"


def phase_means(batches: list[Batch]) -> dict[str, float]:
    """Mean seconds per batch of every phase (zeros for no batch)."""
    names = [*PHASES, "state_commit"]
    if not batches:
        return dict.fromkeys(names, 0.0)
    return {n: sum(b.seconds.get(n, 0.0) for b in batches) / len(batches) for n in names}


def _batch(progress: Any) -> Batch:
    """A Batch from a StreamingQueryProgress (read by its properties: some of its dict's
    values, numInputRows among them, are derived and not stored)."""
    durations = progress.durationMs or {}
    seconds = {name: durations.get(key, 0) / 1000 for name, key in PHASES.items()}
    operators = progress.stateOperators or []
    seconds["state_commit"] = sum(op.commitTimeMs for op in operators) / 1000
    return Batch(rows=int(progress.numInputRows or 0), seconds=seconds)


class Ledger:
    """The query's batches that took input, each counted once over all its runs.

    Spark reports every trigger's progress; the benchmark reads the reports more than once
    (the recent ones, at every poll). A batch is known by its run and batch id; a report of
    a trigger that found no data has no rows and may carry the id of the batch that comes
    next, so only reports with rows count, each once."""

    def __init__(self) -> None:
        self.rows = 0
        self.batches: list[Batch] = []
        self._seen: set[tuple[str, int]] = set()
        self._latest: tuple[str, int, str] | None = None

    def news(self, run: str, last: Any) -> bool:
        """Whether `last`, a run's latest report, is not the one looked at before."""
        mark = (run, int(last.batchId), str(last.timestamp))
        if mark == self._latest:
            return False
        self._latest = mark
        return True

    def absorb(self, run: str, progresses: Iterable[Any]) -> None:
        """Count the batches of `progresses` (one run's reports) not counted yet."""
        for progress in progresses:
            key = (run, int(progress.batchId))
            if not progress.numInputRows or key in self._seen:
                continue
            self._seen.add(key)
            batch = _batch(progress)
            self.batches.append(batch)
            self.rows += batch.rows


class StreamingAggregation:
    """The query over the segments under `source_glob`, its checkpoint in `checkpoint_dir`,
    on its own session of the Spark Connect server at `spark_remote`."""

    def __init__(self, spark_remote: str, source_glob: str, checkpoint_dir: str) -> None:
        from pyspark.sql import SparkSession

        self.spark: SparkSession = SparkSession.builder.remote(spark_remote).create()
        self.spark.conf.set("spark.sql.streaming.stopTimeout", f"{int(STOP_TIMEOUT_S * 1000)}")
        self.source_glob = source_glob
        self.checkpoint_dir = checkpoint_dir
        self.ledger = Ledger()
        self._query: StreamingQuery | None = None

    @property
    def rows_processed(self) -> int:
        """Input rows the query has taken, over all its runs."""
        return self.ledger.rows

    @property
    def batches(self) -> list[Batch]:
        """Every batch that took input, over all runs, in order."""
        return self.ledger.batches

    def _aggregates(self) -> DataFrame:
        from pyspark.sql import functions as F

        rows = self.spark.readStream.format("parquet").schema(INPUT_DDL).load(self.source_glob)
        return rows.groupBy("key").agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
            F.max_by("value", "offset").alias("last"),
        )

    def _start(self, available_now: bool) -> StreamingQuery:
        if self._query is not None:
            raise RuntimeError("the query is already running")
        writer = (
            self._aggregates()
            .writeStream.format("memory")
            .queryName(SINK_NAME)
            .outputMode("complete")
            .option("checkpointLocation", self.checkpoint_dir)
        )
        # No trigger given is Spark's default: the next micro-batch as soon as the last one
        # ends and new files are there.
        query = (writer.trigger(availableNow=True) if available_now else writer).start()
        self._query = query
        return query

    def start(self) -> None:
        """Run the query (default trigger) until `stop`; returns once it is past initializing
        (looking for or processing data)."""
        query = self._start(available_now=False)
        deadline = time.monotonic() + STARTED_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check(query)
            if not str(query.status["message"]).startswith("Initializing"):
                return
            time.sleep(POLL_S)
        raise TimeoutError(f"the streaming query did not start in {STARTED_TIMEOUT_S} s")

    def run_available_now(self) -> list[Batch]:
        """One run with the availableNow trigger: every file not yet taken, then it ends.
        Returns the batches of the run."""
        before = len(self.batches)
        query = self._start(available_now=True)
        try:
            if not query.awaitTermination(AVAILABLE_NOW_TIMEOUT_S):
                raise TimeoutError(f"availableNow run not done in {AVAILABLE_NOW_TIMEOUT_S} s")
            self._check(query)
        finally:
            self.stop()
        return self.batches[before:]

    def _check(self, query: StreamingQuery) -> None:
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"the streaming query failed: {error}")

    def poll(self) -> None:
        """Take in the progress of batches the running query finished since the last poll."""
        query = self._query
        if query is None:
            return
        self._check(query)
        last = query.lastProgress
        if last is None or not self.ledger.news(str(query.runId), last):
            return
        # Something new: the recent reports, so a batch finished between polls is not missed.
        self.ledger.absorb(str(query.runId), query.recentProgress)

    def wait_rows(self, total: int, timeout_s: float) -> None:
        """Until the running query has taken `total` rows over all its runs (bounded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if self.rows_processed >= total:
                return
            time.sleep(POLL_S)
        raise TimeoutError(
            f"the streaming query took {self.rows_processed} of {total} rows in {timeout_s} s"
        )

    def stop(self) -> None:
        """Stop the running query, if any (bounded by the session's stop timeout), and take
        in the batches it finished since the last poll: their rows are in its checkpoint,
        so the next run will not take them again."""
        query, self._query = self._query, None
        if query is not None:
            query.stop()
            self.ledger.absorb(str(query.runId), query.recentProgress)

    def last(self, key: str) -> float | None:
        """`key`'s last value as the sink shows it now, or None."""
        from pyspark.sql import functions as F

        rows = self.spark.table(SINK_NAME).where(F.col("key") == key).select("last").collect()
        return float(rows[0]["last"]) if rows else None

    def state(self) -> dict[str, tuple[int, float, float, float, float]]:
        """The sink's whole table: key -> (count, sum, min, max, last)."""
        rows: list[dict[str, Any]] = self.spark.table(SINK_NAME).toArrow().to_pylist()
        return {
            str(r["key"]): (
                int(r["count"]),
                float(r["sum"]),
                float(r["min"]),
                float(r["max"]),
                float(r["last"]),
            )
            for r in rows
        }

    def close(self) -> None:
        """Stop the query and release the session."""
        try:
            self.stop()
        finally:
            with contextlib.suppress(Exception):
                self.spark.stop()
