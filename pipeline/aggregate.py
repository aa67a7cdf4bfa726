"""The Spark computation: per-(partition, key) aggregates of source segments, via Spark Connect.

Invariant: the aggregates equal the pure-Python reference ``state.aggregate_records`` over the
same rows: count, sum, min, max, ``last`` = the value at the largest offset (``max_by(value,
offset)``; ``last()`` depends on row order and is never used), ``last_offset`` and
``first_offset``. One call is one Spark job over all the files it is given.

Plugging in a computation: a ``Transform`` is ``Callable[[DataFrame], DataFrame]`` applied to
the input rows (columns key: string, value: double, offset: long, partition: int) before the
aggregation; it may filter, rewrite key/value or add columns, but must keep those four
columns. Load one from a "package.module:function" string with ``load_transform``. In
``batch_job`` the partition column is null (the oracle does not route), so transforms that
must match the oracle should not depend on it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

from pipeline.source import Segment
from pipeline.state import KeyState, PartitionState
from pipeline.store import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "AggregateError",
    "Aggregator",
    "BatchInput",
    "Transform",
    "bound_retries",
    "identity",
    "key_state_of_row",
    "load_transform",
    "stage",
]

Transform = Callable[["DataFrame"], "DataFrame"]
# The input schema in Spark DDL: given explicitly, never inferred (inference costs a job).
INPUT_DDL = "key STRING, value DOUBLE, offset BIGINT"
FILES_DDL = "_file STRING, partition INT, _from_offset BIGINT"
PLAN_CACHE_CONF = "spark.connect.session.planCache.enabled"
# Even with the plan cache off, a Connect session keeps every local relation over 1 MiB it
# was sent (they travel as cached artifacts), so the driver heap grows with every arrow
# batch. Releasing the session frees them: the arrow path starts a new session after this
# many batches or bytes (about a second each time).
ARROW_BATCHES_PER_SESSION_MAX = 50
ARROW_BYTES_PER_SESSION_MAX = 128 * 1024 * 1024
# Bounds the files (and so the size of the broadcast path -> partition table) of one job.
FILES_PER_JOB_MAX = 4096
# A files batch over at most this many (partition, from_offset) groups is one read per group,
# unioned (no per-row file path, no join); over more, one read joined with a (file ->
# partition, from_offset) table, so that the plan does not grow with the partitions.
UNION_READS_MAX = 32
# The Connect client's own retries of a call that found no server (gRPC UNAVAILABLE). Its
# default waits 50 ms * 4^n up to a minute, fifteen times (over ten minutes): a restarted
# server is back long before the client looks again. Capped here at about 1.5 s, so that
# the failure reaches the micro-batch loop, which makes a new session on its own schedule
# (spark_reconnect_backoff_s_min/max).
SPARK_RPC_RETRIES_MAX = 4
SPARK_RPC_BACKOFF_MS_INITIAL = 100
SPARK_RPC_BACKOFF_MS_MAX = 800


def bound_retries(spark: SparkSession) -> None:
    """Cap the Connect client's own retries of `spark` (SPARK_RPC_RETRIES_MAX above)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = getattr(spark, "client", None)
    if client is None:  # a classic (non-Connect) session: nothing to bound
        return
    client.set_retry_policies(
        [
            DefaultPolicy(
                max_retries=SPARK_RPC_RETRIES_MAX,
                initial_backoff=SPARK_RPC_BACKOFF_MS_INITIAL,
                backoff_multiplier=2.0,
                max_backoff=SPARK_RPC_BACKOFF_MS_MAX,
            )
        ]
    )


class AggregateError(Exception):
    """The Spark job's result cannot be trusted (e.g. rows from a file it was not given)."""


def _spark_paths(location: str) -> tuple[str, ...]:
    """How Spark may spell an input in _metadata.file_path: "file:" + a URI path for a local
    file (given as a path or a file:// URI), the URI itself (raw or quoted) for s3a:// etc."""
    if location.startswith("file://"):
        location = unquote(urlparse(location).path)
    elif "://" in location:
        scheme, rest = location.split("://", 1)
        return tuple(dict.fromkeys((location, f"{scheme}://{quote(rest, safe='/')}")))
    absolute = os.path.abspath(location)
    return tuple(dict.fromkeys(("file:" + absolute, "file:" + quote(absolute, safe="/"))))


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchInput:
    partition: int
    path: str
    from_offset: int = 0


def identity(df: DataFrame) -> DataFrame:
    return df


def load_transform(spec: str) -> Transform:
    """Resolve "package.module:function" to a Transform."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"transform must look like 'package.module:function', got {spec!r}")
    fn = getattr(importlib.import_module(module_name), attr)
    if not callable(fn):
        raise TypeError(f"{spec!r} is not callable")
    transform: Transform = fn
    return transform


def stage(store: ObjectStore, segment: Segment, directory: str) -> str:
    """A local path Spark can read for ``segment``: the object itself for a local store, or
    a copy in ``directory`` (a local Spark server cannot read s3a:// without hadoop-aws)."""
    path = store.local_path(segment.key)
    if path is not None:
        return path
    target = os.path.join(directory, *segment.key.split("/"))
    if os.path.exists(target):  # segments are immutable: a staged copy never goes stale
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(store.get(segment.key))
        os.replace(tmp, target)  # atomic: Spark never sees a half-copied file
    except BaseException:
        # A full disk keeps no half-written copy: it would hold on to the space it lacks.
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return target


def _files_schema() -> StructType:
    """FILES_DDL as a StructType built here: handing createDataFrame the DDL string costs a
    round trip to the server to parse it, every batch."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("_file", StringType()),
            StructField("partition", IntegerType()),
            StructField("_from_offset", LongType()),
        ]
    )


def key_state_of_row(row: dict[str, Any]) -> KeyState:
    """A key's state from one aggregated row as pyarrow's (untyped) to_pylist gives it:
    converted field by field, here only."""
    return KeyState(
        count=int(row["count"]),
        sum=float(row["sum"]),
        min=float(row["min"]),
        max=float(row["max"]),
        last=float(row["last"]),
        last_offset=int(row["last_offset"]),
        first_offset=int(row["first_offset"]),
    )


class Aggregator:
    """Runs the aggregation on a Spark Connect server (local or a cluster's).

    One session while it works: a new session per batch would cost a round of session set-up
    and lose the server's cached metadata. `reconnect` replaces it when the server lost it
    (a restart) or a job on it had to be cut off."""

    def __init__(
        self, spark_remote: str, transform: Transform = identity, *, own_session: bool = False
    ) -> None:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.remote(spark_remote)
        # getOrCreate returns this process's default session whatever its URL: a process
        # that talks to a second server (a test's cluster) asks for its own session.
        self.spark: SparkSession = builder.create() if own_session else builder.getOrCreate()
        self._remote = spark_remote
        self.transform = transform
        self.arrow_batches_per_session_max = ARROW_BATCHES_PER_SESSION_MAX
        self._arrow_batches = 0
        self._arrow_bytes = 0
        self.sessions_renewed = 0
        self._configure()

    def _configure(self) -> None:
        bound_retries(self.spark)
        # Every arrow batch is a new plan holding its rows: the Connect plan cache would keep
        # them all for the session's life, until the driver runs out of memory. Servers we
        # start turn it off; ask for it per session too, for servers we did not start.
        with contextlib.suppress(Exception):
            self.spark.conf.set(PLAN_CACHE_CONF, "false")

    def _renew_session(self) -> None:
        """A new session, the old one released: the server frees what it kept per session."""
        self._replace(self._connect())
        self.sessions_renewed += 1

    def _connect(self) -> SparkSession:
        """A new session on a fresh channel, proven by one call (making one calls nothing)."""
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(self._remote).create()
        bound_retries(spark)
        try:
            spark.version  # noqa: B018 - an AnalyzePlan round trip: the server knows us
        except BaseException:
            with contextlib.suppress(Exception):
                spark.stop()
            raise
        return spark

    def _replace(self, spark: SparkSession) -> None:
        old, self.spark = self.spark, spark
        self._configure()
        self._arrow_batches = self._arrow_bytes = 0
        # Releasing the old session frees what the server kept for it; one the server lost
        # answers with an error, which changes nothing here.
        with contextlib.suppress(Exception):
            old.stop()

    def reconnect(self) -> None:
        """Replace the session with a new one that answers; raises (the old one kept) when
        the server cannot make one. Blocking: run it in a thread."""
        self._replace(self._connect())

    def interrupt(self) -> None:
        """Cancel every operation running on the session (a job past its timeout)."""
        self.spark.interruptAll()

    def _read(self, paths: Sequence[str]) -> DataFrame:
        return self.spark.read.schema(INPUT_DDL).parquet(*paths)

    def _aggregate(self, df: DataFrame, by: list[str]) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F

        out = df.groupBy(*by).agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
            F.max_by("value", "offset").alias("last"),
            F.max("offset").alias("last_offset"),
            F.min("offset").alias("first_offset"),
        )
        # Arrow is the fast path out of Spark Connect (no per-row Python objects on the wire).
        rows: list[dict[str, Any]] = out.toArrow().to_pylist()
        return rows

    def aggregate(self, inputs: Sequence[BatchInput]) -> dict[int, PartitionState]:
        """Per-partition, per-key aggregates of every input row with offset >= its from_offset."""
        from pyspark.sql import functions as F

        if not inputs:
            return {}
        paths = [i.path for i in inputs]
        if len(set(paths)) != len(paths):
            raise ValueError("the same file appears twice in one batch (it would count twice)")
        if len(inputs) > FILES_PER_JOB_MAX:
            raise ValueError(f"{len(inputs)} files exceed FILES_PER_JOB_MAX={FILES_PER_JOB_MAX}")
        # Up to UNION_READS_MAX (partition, from_offset) groups: one read per group, unioned
        # (`_union`), which runs faster than the path join for few groups (docs/pipeline.md,
        # "Processing on Spark Connect", has the figures).
        groups: dict[tuple[int, int], list[str]] = {}
        for i in inputs:
            groups.setdefault((i.partition, i.from_offset), []).append(i.path)
        if len(groups) <= UNION_READS_MAX:
            return self._per_partition(self._union(groups), paths)
        # Past that, ONE Parquet scan over every file, so the plan does not grow with the
        # groups; each row finds its partition and from_offset by its file's path (Spark's
        # hidden _metadata.file_path) in a broadcast hash join with a small local table of the
        # inputs (literal path->partition maps scan their keys linearly per row: slow with
        # many files). The join is a LEFT join and a row whose path is unknown keeps a null
        # partition, so a path-spelling mismatch surfaces as an error below instead of as
        # lost rows.
        file_rows = [(f, i.partition, i.from_offset) for i in inputs for f in _spark_paths(i.path)]
        files = self.spark.createDataFrame(file_rows, _files_schema())
        df = (
            self._read(paths)
            .withColumn("_file", F.col("_metadata.file_path"))
            .join(F.broadcast(files), "_file", "left")
            .where(F.col("offset") >= F.coalesce(F.col("_from_offset"), F.lit(0)))
            .drop("_file", "_from_offset")
        )
        return self._per_partition(df, paths)

    def _union(self, groups: dict[tuple[int, int], list[str]]) -> DataFrame:
        """One read per (partition, from_offset), its partition a literal and its offset
        bound one filter, the reads unioned: no per-row file path and no join (a worker's
        batch has one group per partition: its segments from its offset)."""
        from pyspark.sql import functions as F

        frames = []
        for (p, frm), part_paths in sorted(groups.items()):
            df = self._read(part_paths)
            if frm > 0:
                df = df.where(F.col("offset") >= F.lit(frm))
            frames.append(df.withColumn("partition", F.lit(p).cast("int")))
        out = frames[0]
        for df in frames[1:]:
            out = out.unionByName(df)
        return out

    def aggregate_table(self, table: pa.Table) -> dict[int, PartitionState]:
        """The arrow data path: ``table`` (key, value, offset, partition) holds exactly the rows
        to aggregate, read by the worker; Spark gets them as a local relation, reads no file."""
        if table.num_rows == 0:
            return {}
        if (
            self._arrow_batches >= self.arrow_batches_per_session_max
            or self._arrow_bytes >= ARROW_BYTES_PER_SESSION_MAX
        ):
            self._renew_session()
        self._arrow_batches += 1
        self._arrow_bytes += table.nbytes
        return self._per_partition(self.spark.createDataFrame(table), ["(an Arrow batch)"])

    def _per_partition(self, df: DataFrame, inputs: Sequence[str]) -> dict[int, PartitionState]:
        result: dict[int, PartitionState] = {}
        for row in self._aggregate(self.transform(df), ["partition", "key"]):
            if row["partition"] is None:
                raise AggregateError(f"rows of an unrecognised file path; inputs: {inputs[:3]}")
            result.setdefault(int(row["partition"]), {})[str(row["key"])] = key_state_of_row(row)
        return result

    def batch_job(self, paths: Sequence[str]) -> PartitionState:
        """One Spark batch job over whole input files: the baseline and the equality oracle."""
        from pyspark.sql import functions as F

        if not paths:
            return {}
        df = self._read(paths).withColumn("partition", F.lit(None).cast("int"))
        return {
            str(r["key"]): key_state_of_row(r) for r in self._aggregate(self.transform(df), ["key"])
        }

    def batch_job_table(self, table: pa.Table) -> PartitionState:
        """``batch_job`` over rows read by the caller (key, value, offset): the oracle on a
        Spark whose executors cannot see our files."""
        from pyspark.sql import functions as F

        if table.num_rows == 0:
            return {}
        df = self.spark.createDataFrame(table).withColumn("partition", F.lit(None).cast("int"))
        return {
            str(r["key"]): key_state_of_row(r) for r in self._aggregate(self.transform(df), ["key"])
        }

    def close(self) -> None:
        self.spark.stop()
