"""How a micro-batch's segments reach Spark: the data paths, their bounds, and the start-up probe.

Three paths, one per kind of deployment (docs/pipeline.md):

- ``files``: Spark reads local files the worker names: the store's own files (local store) or
  copies staged into the staging directory (S3). Needs the Spark driver AND executors to see
  those paths: one machine, or a shared volume.
- ``arrow``: the worker reads the segments itself (pyarrow through the ObjectStore) and ships
  the rows to Spark Connect as Arrow (``createDataFrame``). Needs nothing shared; every row
  goes through the Spark driver, so a batch is bounded in rows and bytes.
- ``direct``: Spark reads the store itself by URI: ``file://`` (a path every executor sees)
  or ``s3a://`` (a cluster with hadoop-aws). The worker passes names, never copies.

Invariant: a batch covers whole segments only, each partition's segments contiguous from its
current offset, so a partition's offset can advance to the end of what the batch read. A
segment already fetched is not fetched again while it is still needed: the arrow path keeps
read tables in a byte-bounded cache until a batch that used them succeeds, the files path
keeps staged copies until then.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.aggregate import Aggregator, BatchInput, stage
from pipeline.source import SCHEMA, Segment, SourceLog
from pipeline.state import PartitionState
from pipeline.store import ObjectStore

__all__ = [
    "ARROW_BATCH_BYTES_MAX_DEFAULT",
    "ARROW_BATCH_ROWS_MAX_DEFAULT",
    "DataPath",
    "Feed",
    "PlannedBatch",
    "ProbeFailed",
    "SegmentCache",
    "default_data_path",
]


class DataPath(Enum):
    FILES = "files"
    ARROW = "arrow"
    DIRECT = "direct"


# One arrow batch is one Spark Connect plan. Spark Connect refuses messages over
# spark.connect.grpc.maxInboundMessageSize (128 MiB); relations over 1 MiB travel as chunked
# artifacts, but the driver still holds the whole batch (and, with the plan cache on, every
# past one). 32 MiB keeps a batch a quarter of the gRPC limit and the driver rule simple.
ARROW_BATCH_BYTES_MAX_DEFAULT = 32 * 1024 * 1024
ARROW_BATCH_ROWS_MAX_DEFAULT = 1_000_000
# Tables read but not yet consumed by a successful batch (a failing batch's input is kept for
# its retry). Two batches' worth: the one retrying and the next one.
SEGMENT_CACHE_BYTES_MAX_DEFAULT = 2 * ARROW_BATCH_BYTES_MAX_DEFAULT
SEGMENTS_PER_BATCH_MAX = 2048
# On the files path a batch of at most this many rows goes as Arrow instead: the worker can
# read the store too, and for small batches a local relation costs less than a file scan
# with its path join (docs/pipeline.md has the figures). Larger batches are scanned by Spark.
FILES_ARROW_ROWS_MAX_DEFAULT = 50_000
PROBE_KEY_PREFIX = "probes/"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class ProbeFailed(Exception):
    """Spark could not read what this worker would hand it through its data path."""


def default_data_path(store: ObjectStore, spark_remote: str) -> DataPath:
    """``files`` when Spark runs on this machine (it sees our paths: fastest, the embedded
    default), ``arrow`` for any other endpoint (it assumes nothing shared)."""
    host = urlparse(spark_remote.replace("sc://", "http://", 1)).hostname or ""
    return DataPath.FILES if host in _LOOPBACK else DataPath.ARROW


def direct_uri(store: ObjectStore, key: str) -> str:
    """The name Spark reads ``key`` by on the direct path: file:///... or s3a://bucket/key."""
    uri = store.uri(key)
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


class SegmentCache:
    """Arrow tables of segments, evicted least recently used beyond ``bytes_max``."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> pa.Table | None:
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
            return table

    def put(self, key: str, table: pa.Table) -> None:
        with self._lock:
            if key in self._tables:
                return
            self._tables[key] = table
            self._bytes += table.nbytes
            while self._bytes > self.bytes_max and len(self._tables) > 1:
                _, old = self._tables.popitem(last=False)
                self._bytes -= old.nbytes

    def drop(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                old = self._tables.pop(key, None)
                if old is not None:
                    self._bytes -= old.nbytes

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._tables)


@dataclass(slots=True)
class PlannedBatch:
    """One micro-batch's input: segment keys read, each partition's new end offset, and the
    input in the form the data path hands Spark (paths/URIs, or one Arrow table)."""

    keys: list[str] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)
    # Each planned partition's source log end as listed now (for the lag metric): whatever
    # the batch bounds left out is still owed.
    heads: dict[int, int] = field(default_factory=dict)
    inputs: list[BatchInput] = field(default_factory=list)
    table: pa.Table | None = None
    rows: int = 0
    nbytes: int = 0

    def __bool__(self) -> bool:
        return bool(self.keys)


def _round_robin(pending: dict[int, list[Segment]]) -> Iterator[Segment]:
    """One segment of each partition per round, so a partition far behind does not starve
    the others of a bounded batch."""
    queues = {p: list(segs) for p, segs in sorted(pending.items())}
    while queues:
        for p in list(queues):
            yield queues[p].pop(0)
            if not queues[p]:
                del queues[p]


class Feed:
    """Plans micro-batches for one data path and runs them on an Aggregator."""

    def __init__(
        self,
        path: DataPath,
        store: ObjectStore,
        source: SourceLog,
        staging: str,
        *,
        arrow_rows_max: int = ARROW_BATCH_ROWS_MAX_DEFAULT,
        arrow_bytes_max: int = ARROW_BATCH_BYTES_MAX_DEFAULT,
        cache_bytes_max: int = SEGMENT_CACHE_BYTES_MAX_DEFAULT,
        segments_max: int = SEGMENTS_PER_BATCH_MAX,
        files_arrow_rows_max: int = FILES_ARROW_ROWS_MAX_DEFAULT,
    ) -> None:
        self.path = path
        self.store = store
        self.source = source
        self.staging = staging
        self.arrow_rows_max = arrow_rows_max
        self.arrow_bytes_max = arrow_bytes_max
        self.segments_max = segments_max
        self.files_arrow_rows_max = files_arrow_rows_max
        self.cache = SegmentCache(cache_bytes_max)
        # Only the files path on a remote store makes copies (and so has files to remove).
        self.stages_copies = path is DataPath.FILES and store.local_path("source") is None
        self.fetched = 0  # segments downloaded or read from the store, for metrics

    # -- planning (blocking: store I/O) -------------------------------------------------------

    def plan(self, offsets: dict[int, int]) -> PlannedBatch:
        """The next batch from each partition's offset, within the path's bounds."""
        pending = {p: self.source.segments(p, off) for p, off in offsets.items()}
        batch = PlannedBatch(
            heads={p: segs[-1].end_offset if segs else offsets[p] for p, segs in pending.items()}
        )
        pending = {p: segs for p, segs in pending.items() if segs}
        as_arrow = self.path is DataPath.ARROW or (
            self.path is DataPath.FILES and self._small(pending)
        )
        tables: list[pa.Table] = []
        stopped: set[int] = set()  # partitions whose next segment did not fit: keep contiguity
        for seg in _round_robin(pending):
            p = seg.partition
            if p in stopped:
                continue
            if len(batch.keys) >= self.segments_max:
                break
            from_offset = offsets[p]
            if as_arrow:
                table = self._read(seg)
                rows, nbytes = table.num_rows, table.nbytes
                if batch.keys and (
                    batch.rows + rows > self.arrow_rows_max
                    or batch.nbytes + nbytes > self.arrow_bytes_max
                ):
                    stopped.add(p)
                    continue
                if seg.first_offset < from_offset:
                    table = table.filter(pc.greater_equal(table["offset"], from_offset))
                tables.append(
                    table.append_column(
                        "partition", pa.array([p] * table.num_rows, type=pa.int32())
                    )
                )
                batch.rows += rows
                batch.nbytes += nbytes
            else:
                # Only a segment that straddles the offset needs the row filter (a checkpoint
                # can end mid-segment); a whole segment is read unfiltered, so a batch is
                # one read per partition, with no per-row predicate.
                batch.inputs.append(
                    BatchInput(
                        partition=p,
                        path=self._location(seg),
                        from_offset=from_offset if seg.first_offset < from_offset else 0,
                    )
                )
                batch.rows += seg.count
            batch.keys.append(seg.key)
            batch.ends[p] = seg.end_offset
        if tables:
            batch.table = pa.concat_tables(tables)
        return batch

    def _small(self, pending: dict[int, list[Segment]]) -> bool:
        """Whether the files path's next batch is small enough to go as Arrow."""
        rows = 0
        for i, seg in enumerate(_round_robin(pending)):
            if i >= self.segments_max:
                break
            rows += seg.count
            if rows > self.files_arrow_rows_max:
                return False
        return True

    def _read(self, seg: Segment) -> pa.Table:
        table = self.cache.get(seg.key)
        if table is None:
            table = self.source.read_segment(seg)
            self.fetched += 1
            self.cache.put(seg.key, table)
        return table

    def _location(self, seg: Segment) -> str:
        if self.path is DataPath.DIRECT:
            return direct_uri(self.store, seg.key)
        if self.stages_copies and not os.path.exists(os.path.join(self.staging, seg.key)):
            self.fetched += 1
        return stage(self.store, seg, self.staging)

    # -- running -------------------------------------------------------------------------------

    def run(self, aggregator: Aggregator, batch: PlannedBatch) -> dict[int, PartitionState]:
        if batch.table is not None:
            return aggregator.aggregate_table(batch.table)
        return aggregator.aggregate(batch.inputs)

    def done(self, batch: PlannedBatch) -> None:
        """The batch succeeded: its segments are not needed again here. A failed batch is
        not passed here, so its retry finds its input still cached or staged."""
        self.cache.drop(batch.keys)
        if self.stages_copies:
            for i in batch.inputs:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(i.path)

    # -- start-up probe ------------------------------------------------------------------------

    def probe(self, aggregator: Aggregator, worker_id: str) -> None:
        """Prove that Spark reads what this path hands it: a small probe segment in the store,
        read through this path, must aggregate to what the worker itself reads from it.

        The probe object is written once per worker id (create-only; the same id reuses it).
        """
        key = f"{PROBE_KEY_PREFIX}{worker_id}.parquet"
        probe = pa.table(
            {
                "key": pa.array(["ripple-probe", "ripple-probe"], pa.string()),
                "value": pa.array([1.5, 2.25], pa.float64()),
                "offset": pa.array([0, 1], pa.int64()),
            },
            schema=SCHEMA,
        )
        sink = io.BytesIO()
        pq.write_table(probe, sink)
        self.store.put_if_absent(key, sink.getvalue())
        stored = pq.read_table(io.BytesIO(self.store.get(key)), schema=SCHEMA)
        segment = Segment(partition=0, first_offset=0, count=stored.num_rows, key=key)
        batch = PlannedBatch(keys=[key], ends={0: segment.end_offset})
        if self.path is DataPath.ARROW:
            batch.table = stored.append_column(
                "partition", pa.array([0] * stored.num_rows, type=pa.int32())
            )
        else:
            batch.inputs = [BatchInput(partition=0, path=self._location(segment))]
        where = batch.inputs[0].path if batch.inputs else "an Arrow batch"
        try:
            result = self.run(aggregator, batch)
        except Exception as exc:
            raise ProbeFailed(
                f"Spark could not read the probe object {key!r} through the {self.path.value!r} "
                f"data path ({where}): {_first_line(exc)}"
            ) from exc
        finally:
            if self.stages_copies:
                self.done(batch)
        got = result.get(0, {}).get("ripple-probe")
        want_count = stored.num_rows
        want_sum = float(pc.sum(stored["value"]).as_py())
        if got is None or got.count != want_count or got.sum != want_sum:
            raise ProbeFailed(
                f"the probe object {key!r} read through the {self.path.value!r} data path "
                f"({where}) gave {got}, expected count={want_count} sum={want_sum}"
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
