"""The source log: a durable, partitioned, offset-addressed log of ``(key, value)`` records.

Layout: ``source/p{partition:05d}/{first_offset:020d}.parquet``, Parquet columns key (string),
value (double), offset (int64).

Invariant: per partition, segments tile the offsets 0, 1, 2, ... with no gap and no overlap,
and a segment never changes once written. It holds because the object key names only the
segment's first offset and segments are created with a create-only put: two appenders racing
for the same next offset write the same key, exactly one wins and the loser re-lists and
retries at the new end. (A key that also named the count, ``{first}-{count}``, would let two
racers with different counts both "win" the same offsets.) A segment's count is therefore
derived: the next segment's first offset minus its own, and for the last segment its Parquet
row count (read once and cached: objects are immutable).
"""

from __future__ import annotations

import io
import json
import math
import random
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.store import ObjectStore, StoreError
from shared.routing import partition_for_key

__all__ = [
    "APPEND_RETRIES_MAX",
    "SCHEMA",
    "SEGMENT_RECORDS_MAX",
    "Producer",
    "Segment",
    "SourceCorrupt",
    "SourceInputError",
    "SourceLog",
    "generate",
    "load_jsonl",
    "segment_key",
]

SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
    ]
)
# Bounds a segment's size (~1.5 MB of Parquet) so one object stays cheap to stage and replay.
SEGMENT_RECORDS_MAX = 100_000
# Each retry means another producer appended first; under heavy contention give up loudly.
APPEND_RETRIES_MAX = 64
KEY_CHARS_MAX = 1024
JSONL_LINE_BYTES_MAX = 64 * 1024
# Generated prices are multiples of 1/64 (old-style stock ticks) so sums are exact in binary
# floating point and the incremental pipeline equals the batch job bit for bit.
PRICE_TICK = 1 / 64

_SEGMENT_NAME = re.compile(r"^(\d{20})\.parquet$")


class SourceCorrupt(StoreError):
    """The stored segments break the contiguity invariant (a gap or an unreadable segment)."""


class SourceInputError(ValueError):
    """Producer input that is not a valid record; the message names where it came from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    partition: int
    first_offset: int
    count: int
    key: str

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count


def partition_prefix(partition: int) -> str:
    return f"source/p{partition:05d}/"


def segment_key(partition: int, first_offset: int) -> str:
    return f"{partition_prefix(partition)}{first_offset:020d}.parquet"


def _check_record(key: object, value: object, where: str) -> tuple[str, float]:
    if not isinstance(key, str) or not key:
        raise SourceInputError(f"{where}: key must be a non-empty string, got {key!r}")
    if len(key) > KEY_CHARS_MAX:
        raise SourceInputError(f"{where}: key longer than {KEY_CHARS_MAX} characters")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SourceInputError(f"{where}: value must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise SourceInputError(f"{where}: value must be finite, got {value!r}")
    return key, number


class SourceLog:
    """Append to and replay the per-partition logs in one store."""

    def __init__(self, store: ObjectStore, total_partitions: int) -> None:
        if total_partitions <= 0:
            raise ValueError(f"total_partitions must be positive, got {total_partitions}")
        self.store = store
        self.total_partitions = total_partitions
        self._counts: dict[str, int] = {}  # segment key -> row count; segments are immutable
        self._lock = threading.Lock()

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.total_partitions:
            raise ValueError(f"partition {partition} not in [0, {self.total_partitions})")

    def _tail_count(self, key: str) -> int:
        with self._lock:
            cached = self._counts.get(key)
        if cached is not None:
            return cached
        path = self.store.local_path(key)
        try:
            if path is not None:
                rows = pq.read_metadata(path).num_rows
            else:
                rows = pq.read_metadata(io.BytesIO(self.store.get(key))).num_rows
        except (OSError, pa.ArrowException) as exc:
            raise SourceCorrupt(f"segment {key!r} is unreadable: {exc}") from exc
        with self._lock:
            self._counts[key] = int(rows)
        return int(rows)

    def segments(self, partition: int, from_offset: int = 0) -> list[Segment]:
        """Segments holding any offset >= ``from_offset``, in offset order.

        Only names are listed (plus the tail's row count), so a planted gap shows up as a
        too-large count here and is caught when the segment is read (``read_segment``).
        """
        self._check_partition(partition)
        firsts: list[tuple[int, str]] = []
        for key in self.store.list_keys(partition_prefix(partition)):
            match = _SEGMENT_NAME.match(key.rsplit("/", 1)[-1])
            if match is None:
                continue  # not a segment (foreign object); never part of the log
            firsts.append((int(match.group(1)), key))
        result: list[Segment] = []
        expected = 0
        for i, (first, key) in enumerate(firsts):
            if first != expected:
                raise SourceCorrupt(
                    f"partition {partition}: segment {key!r} starts at {first}, expected {expected}"
                )
            count = firsts[i + 1][0] - first if i + 1 < len(firsts) else self._tail_count(key)
            if count <= 0:
                raise SourceCorrupt(f"partition {partition}: segment {key!r} has {count} rows")
            expected = first + count
            if expected > from_offset:
                segment = Segment(partition=partition, first_offset=first, count=count, key=key)
                result.append(segment)
        return result

    def end_offset(self, partition: int) -> int:
        """The offset the next appended record will get (= number of records in the partition)."""
        segments = self.segments(partition)
        return segments[-1].end_offset if segments else 0

    def append(self, partition: int, records: Sequence[tuple[str, float]]) -> int:
        """Append ``records`` as one segment; returns the first offset they were given."""
        self._check_partition(partition)
        if not records:
            raise ValueError("append needs at least one record")
        if len(records) > SEGMENT_RECORDS_MAX:
            raise ValueError(f"{len(records)} records exceed SEGMENT_RECORDS_MAX")
        keys = [k for k, _ in records]
        values = [float(v) for _, v in records]
        for _ in range(APPEND_RETRIES_MAX):
            first = self.end_offset(partition)
            table = pa.table(
                {
                    "key": pa.array(keys, pa.string()),
                    "value": pa.array(values, pa.float64()),
                    "offset": pa.array(range(first, first + len(records)), pa.int64()),
                },
                schema=SCHEMA,
            )
            sink = io.BytesIO()
            pq.write_table(table, sink, compression="zstd")
            key = segment_key(partition, first)
            if self.store.put_if_absent(key, sink.getvalue()):
                with self._lock:
                    self._counts[key] = len(records)
                return first
        raise StoreError(
            f"partition {partition}: append lost the race {APPEND_RETRIES_MAX} times in a row"
        )

    def read_segment(self, segment: Segment) -> pa.Table:
        path = self.store.local_path(segment.key)
        try:
            if path is not None:
                table = pq.read_table(path, schema=SCHEMA)
            else:
                table = pq.read_table(io.BytesIO(self.store.get(segment.key)), schema=SCHEMA)
        except (OSError, pa.ArrowException) as exc:
            raise SourceCorrupt(f"segment {segment.key!r} is unreadable: {exc}") from exc
        if table.num_rows != segment.count:
            raise SourceCorrupt(
                f"segment {segment.key!r} has {table.num_rows} rows, expected {segment.count}"
            )
        return table

    def read(self, partition: int, from_offset: int = 0) -> pa.Table:
        """Every record with offset >= ``from_offset``, in offset order (exact replay)."""
        if from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, got {from_offset}")
        tables = [self.read_segment(s) for s in self.segments(partition, from_offset)]
        if not tables:
            return SCHEMA.empty_table()
        table = pa.concat_tables(tables)
        head = tables[0]["offset"][0].as_py()
        if head < from_offset:
            table = table.slice(from_offset - head)
        return table


class Producer:
    """Routes records to partitions and appends them to the source log."""

    def __init__(self, store: ObjectStore, total_partitions: int) -> None:
        self.log = SourceLog(store, total_partitions)

    def produce(self, records: Iterable[tuple[str, float]]) -> dict[int, int]:
        """Append records; returns partition -> first offset given to this call's records.

        Order is kept within a partition. Each partition gets one segment per call, split
        into several only beyond SEGMENT_RECORDS_MAX (then another producer's segment may
        land between them; order is still kept).
        """
        total = self.log.total_partitions
        grouped: dict[int, list[tuple[str, float]]] = {}
        for i, (key, value) in enumerate(records):
            record = _check_record(key, value, f"record {i}")
            grouped.setdefault(partition_for_key(record[0], total), []).append(record)
        firsts: dict[int, int] = {}
        for partition in sorted(grouped):
            batch = grouped[partition]
            for start in range(0, len(batch), SEGMENT_RECORDS_MAX):
                first = self.log.append(partition, batch[start : start + SEGMENT_RECORDS_MAX])
                firsts.setdefault(partition, first)
        return firsts


def load_jsonl(path: str) -> Iterator[tuple[str, float]]:
    """Records from a JSON Lines file of ``{"key": str, "value": number}``; blank lines skipped."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            if len(raw) > JSONL_LINE_BYTES_MAX:
                raise SourceInputError(f"{where}: line longer than {JSONL_LINE_BYTES_MAX} bytes")
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise SourceInputError(f"{where}: not valid JSON: {exc}") from exc
            if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
                raise SourceInputError(f'{where}: expected an object with "key" and "value"')
            yield _check_record(obj["key"], obj["value"], where)


def generate(n: int, keys: int, seed: int) -> list[tuple[str, float]]:
    """``n`` deterministic market-data style records over ``keys`` symbols ("SYM0042", price)."""
    if n < 0 or keys <= 0:
        raise ValueError(f"need n >= 0 and keys > 0, got n={n} keys={keys}")
    rng = random.Random(seed)
    width = max(4, len(str(keys - 1)))
    symbols = [f"SYM{i:0{width}d}" for i in range(keys)]
    # Prices in ticks: a bounded random walk per symbol starting between 10 and 500.
    ticks = [rng.randrange(640, 32_000) for _ in range(keys)]
    out: list[tuple[str, float]] = []
    for _ in range(n):
        i = rng.randrange(keys)
        ticks[i] = max(1, ticks[i] + rng.randint(-32, 32))
        out.append((symbols[i], ticks[i] * PRICE_TICK))
    return out
