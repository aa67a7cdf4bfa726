"""The source log: a durable, partitioned, offset-addressed log of ``(key, value)`` records.

Layout: one log per (routing generation, partition). Generation 0, the layout a cluster
starts with: ``source/p{partition:05d}/{first_offset:020d}.parquet``; generation g >= 1:
``source/g{g:05d}/p{partition:05d}/{first_offset:020d}.parquet``. Parquet columns key
(string), value (double), offset (int64); a recorded pipeline's log has its spec's columns
then offset, and its partitions' own numbers (`base` up). Generation g's offsets start at
``generation_base(g) = g * GENERATION_OFFSETS``, so every offset of a generation is above
every offset of the one before: ``last`` (the value at the largest offset) and the batch job
over all generations keep their meaning, and an offset names its generation.

A rescale ends a generation's partition with a **seal**: a zero-row segment at the
partition's end offset (the cut) whose Parquet metadata names the next generation and its
partition count. An append that finds the seal raises `SourceSealed` with the new routing.

Invariant: per (generation, partition), segments tile the offsets from the generation's base
with no gap and no overlap, at most one seal ends them, and a segment never changes once
written. It holds because the object key names only the segment's first offset and segments
are created with a create-only put: two appenders racing for the same next offset write the
same key, exactly one wins and the loser re-lists and retries at the new end. (A key that
also named the count, ``{first}-{count}``, would let two racers with different counts both
"win" the same offsets.) A segment's count is derived: the next segment's first offset
minus its own, and for the last its Parquet row count (read once, cached: it never changes).
"""

from __future__ import annotations

import io
import math
import random
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.store import ObjectStore, StoreError
from shared.routing import Routing

__all__ = [
    "APPEND_RETRIES_MAX",
    "GENERATION_OFFSETS",
    "SCHEMA",
    "SEALS_FOLLOWED_MAX",
    "SEGMENT_RECORDS_MAX",
    "Producer",
    "Segment",
    "SourceCorrupt",
    "SourceInputError",
    "SourceLog",
    "SourceSealed",
    "check_record",
    "generate",
    "generation_base",
    "generation_of",
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
# Offsets one generation may use (a trillion records per partition); int64 leaves room for
# 8 million generations.
GENERATION_OFFSETS = 2**40
# Seals one produce call follows (each to a newer generation) before it gives up.
SEALS_FOLLOWED_MAX = 16
_SEALED_BY = b"ripple.sealed_by"
_SEALED_PARTITIONS = b"ripple.partitions"
KEY_CHARS_MAX = 1024
# Generated prices are multiples of 1/64 (old-style stock ticks) so sums are exact in binary
# floating point and the incremental pipeline equals the batch job bit for bit.
PRICE_TICK = 1 / 64

_SEGMENT_NAME = re.compile(r"^(\d{20})\.parquet$")


class SourceCorrupt(StoreError):
    """The stored segments break the contiguity invariant (a gap or an unreadable segment)."""


class SourceInputError(ValueError):
    """Producer input that is not a valid record; the message names where it came from."""


class SourceSealed(StoreError):
    """The partition's generation is closed by a rescale: route by ``routing`` instead."""

    def __init__(self, partition: int, cut: int, routing: Routing) -> None:
        super().__init__(
            f"partition {partition} of generation {generation_of(cut)} is sealed at offset "
            f"{cut} by generation {routing.generation} ({routing.partitions} partitions)"
        )
        self.partition = partition
        self.cut = cut
        self.routing = routing


def generation_base(generation: int) -> int:
    """The first offset of every partition of ``generation``."""
    if generation < 0:
        raise ValueError(f"generation must be >= 0, got {generation}")
    return generation * GENERATION_OFFSETS


def generation_of(offset: int) -> int:
    """The generation an offset belongs to."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    return offset // GENERATION_OFFSETS


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    partition: int
    first_offset: int
    count: int
    key: str

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count

    @property
    def generation(self) -> int:
        return generation_of(self.first_offset)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Listing:
    """One (generation, partition) log as listed: its data segments and its seal, if any."""

    segments: list[Segment]
    end_offset: int
    sealed_by: Routing | None


def partition_prefix(partition: int, generation: int = 0) -> str:
    if generation == 0:
        return f"source/p{partition:05d}/"
    return f"source/g{generation:05d}/p{partition:05d}/"


def segment_key(partition: int, first_offset: int) -> str:
    """The object key of the segment starting at ``first_offset`` (which names its generation)."""
    prefix = partition_prefix(partition, generation_of(first_offset))
    return f"{prefix}{first_offset:020d}.parquet"


def check_record(key: object, value: object, where: str) -> tuple[str, float]:
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
    """Append to and replay the per-partition logs of every generation in one store.

    ``total_partitions`` is generation 0's partition count, or the counts of generations
    0, 1, ... in order; appends go to the last (the current generation), reads and seals to
    any of them.
    """

    def __init__(
        self,
        store: ObjectStore,
        total_partitions: int | Sequence[int],
        *,
        base: int = 0,
        schema: pa.Schema = SCHEMA,
    ) -> None:
        counts = (
            (total_partitions,) if isinstance(total_partitions, int) else tuple(total_partitions)
        )
        if not counts:
            raise ValueError("a source log needs at least generation 0's partition count")
        self.routings = tuple(Routing(generation=g, partitions=n) for g, n in enumerate(counts))
        self.store = store
        # A recorded pipeline's partitions are numbered from its first slot (`base`), and its
        # records have its spec's columns (`schema`, `offset` last).
        self.base = base
        self.schema = schema
        self.total_partitions = counts[-1]
        self.generation = len(counts) - 1
        # Segment key -> (row count, the seal's routing or None); segments are immutable.
        self._tails: dict[str, tuple[int, Routing | None]] = {}
        self._lock = threading.Lock()

    @property
    def routing(self) -> Routing:
        """The current generation's routing: where appends go."""
        return self.routings[-1]

    def followed_by(self, routing: Routing) -> SourceLog:
        """This log with ``routing`` as the new current generation (it must be the next)."""
        if routing.generation != self.generation + 1:
            raise ValueError(
                f"generation {routing.generation} does not follow generation {self.generation}"
            )
        log = SourceLog(
            self.store,
            [r.partitions for r in self.routings] + [routing.partitions],
            base=self.base,
            schema=self.schema,
        )
        log._tails = self._tails  # shares the cache: segments never change
        log._lock = self._lock
        return log

    def _check_partition(self, partition: int, generation: int) -> None:
        if not 0 <= generation <= self.generation:
            raise ValueError(f"generation {generation} not in [0, {self.generation}]")
        total = self.routings[generation].partitions
        if not self.base <= partition < self.base + total:
            raise ValueError(f"partition {partition} not in [{self.base}, {self.base + total})")

    def _tail(self, key: str) -> tuple[int, Routing | None]:
        with self._lock:
            cached = self._tails.get(key)
        if cached is not None:
            return cached
        path = self.store.local_path(key)
        try:
            if path is not None:
                meta = pq.read_metadata(path)
            else:
                meta = pq.read_metadata(io.BytesIO(self.store.get(key)))
            rows, sealed_by = int(meta.num_rows), _seal_routing(meta.metadata or {})
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise SourceCorrupt(f"segment {key!r} is unreadable: {exc}") from exc
        with self._lock:
            self._tails[key] = (rows, sealed_by)
        return rows, sealed_by

    def _listing(self, partition: int, generation: int) -> _Listing:
        """List one (generation, partition) log: only names are listed (plus the tail's
        Parquet metadata), so a planted gap shows up as a too-large count here and is caught
        when the segment is read (``read_segment``)."""
        self._check_partition(partition, generation)
        firsts: list[tuple[int, str]] = []
        for key in self.store.list_keys(partition_prefix(partition, generation)):
            match = _SEGMENT_NAME.match(key.rsplit("/", 1)[-1])
            if match is None:
                continue  # not a segment (foreign object); never part of the log
            firsts.append((int(match.group(1)), key))
        segments: list[Segment] = []
        sealed_by: Routing | None = None
        expected = generation_base(generation)
        for i, (first, key) in enumerate(firsts):
            if first != expected:
                raise SourceCorrupt(
                    f"partition {partition}: segment {key!r} starts at {first}, expected {expected}"
                )
            if i + 1 < len(firsts):
                count = firsts[i + 1][0] - first
            else:
                count, sealed_by = self._tail(key)
                if count == 0 and sealed_by is not None:
                    if sealed_by.generation != generation + 1:
                        raise SourceCorrupt(f"seal {key!r} names generation {sealed_by.generation}")
                    break  # the seal: the end of this generation's log
            if count <= 0:
                raise SourceCorrupt(f"partition {partition}: segment {key!r} has {count} rows")
            expected = first + count
            segments.append(Segment(partition=partition, first_offset=first, count=count, key=key))
        return _Listing(segments=segments, end_offset=expected, sealed_by=sealed_by)

    def segments(self, partition: int, from_offset: int = 0) -> list[Segment]:
        """Data segments of ``from_offset``'s generation holding any offset >= ``from_offset``,
        in offset order (a seal is not a data segment)."""
        listing = self._listing(partition, generation_of(from_offset))
        return [s for s in listing.segments if s.end_offset > from_offset]

    def end_offset(self, partition: int, generation: int | None = None) -> int:
        """The offset after the last record of the partition in ``generation`` (default: the
        current one): the next append's offset, or the cut once sealed."""
        gen = self.generation if generation is None else generation
        return self._listing(partition, gen).end_offset

    def cut(self, partition: int, generation: int) -> int | None:
        """The offset where a rescale sealed the partition's ``generation``, if it did."""
        listing = self._listing(partition, generation)
        return listing.end_offset if listing.sealed_by is not None else None

    def append(self, partition: int, records: Sequence[tuple[str, float]]) -> int:
        """Append ``records`` as one segment of the current generation; returns the first
        offset they were given. Raises `SourceSealed` if a rescale sealed the partition."""
        self._check_partition(partition, self.generation)
        if not records:
            raise ValueError("append needs at least one record")
        if len(records) > SEGMENT_RECORDS_MAX:
            raise ValueError(f"{len(records)} records exceed SEGMENT_RECORDS_MAX")
        rows = pa.table(
            {
                "key": pa.array([k for k, _ in records], pa.string()),
                "value": pa.array([float(v) for _, v in records], pa.float64()),
            }
        )
        return self.append_table(partition, rows)

    def append_table(self, partition: int, rows: pa.Table) -> int:
        """Append ``rows`` (the log's columns but ``offset``, in its schema's order) as one
        segment of the current generation; returns the first offset they were given."""
        self._check_partition(partition, self.generation)
        if rows.num_rows == 0:
            raise ValueError("append needs at least one record")
        if rows.num_rows > SEGMENT_RECORDS_MAX:
            raise ValueError(f"{rows.num_rows} records exceed SEGMENT_RECORDS_MAX")
        for _ in range(APPEND_RETRIES_MAX):
            listing = self._listing(partition, self.generation)
            first = listing.end_offset
            if listing.sealed_by is not None:
                raise SourceSealed(partition, first, listing.sealed_by)
            offsets = pa.array(range(first, first + rows.num_rows), pa.int64())
            table = pa.Table.from_arrays([*rows.columns, offsets], schema=self.schema)
            key = segment_key(partition, first)
            if self.store.put_if_absent(key, _parquet(table)):
                with self._lock:
                    self._tails[key] = (rows.num_rows, None)
                return first
        raise StoreError(
            f"partition {partition}: append lost the race {APPEND_RETRIES_MAX} times in a row"
        )

    def seal(self, partition: int, generation: int) -> int:
        """Close ``generation``'s log of ``partition`` for the next generation (which this log
        must know); returns the cut, the offset after its last record. Idempotent: a sealed
        log answers its cut. Races with appenders like an append: the seal takes the next
        offset's name with a create-only put, so a record lands either below the cut or,
        after the appender meets the seal, in the next generation."""
        self._check_partition(partition, generation)
        if generation >= self.generation:
            raise ValueError(f"generation {generation} has no next generation in this log")
        following = self.routings[generation + 1]
        metadata = {
            _SEALED_BY: str(following.generation).encode(),
            _SEALED_PARTITIONS: str(following.partitions).encode(),
        }
        for _ in range(APPEND_RETRIES_MAX):
            listing = self._listing(partition, generation)
            if listing.sealed_by is not None:
                if listing.sealed_by != following:
                    raise SourceCorrupt(
                        f"partition {partition} of generation {generation} is sealed for "
                        f"{listing.sealed_by}, not {following}"
                    )
                return listing.end_offset
            empty = self.schema.empty_table().replace_schema_metadata(metadata)
            key = segment_key(partition, listing.end_offset)
            if self.store.put_if_absent(key, _parquet(empty)):
                with self._lock:
                    self._tails[key] = (0, following)
                return listing.end_offset
        raise StoreError(
            f"partition {partition}: seal lost the race {APPEND_RETRIES_MAX} times in a row"
        )

    def generation_segments(self, generation: int) -> list[Segment]:
        """Every data segment of every partition of ``generation`` (replay, the batch job)."""
        total = self.routings[generation].partitions if generation <= self.generation else 0
        base = generation_base(generation)
        return [s for p in range(self.base, self.base + total) for s in self.segments(p, base)]

    def all_segments(self) -> list[Segment]:
        """Every data segment of every generation this log knows: the batch job's input."""
        return [s for g in range(self.generation + 1) for s in self.generation_segments(g)]

    def read_segment(self, segment: Segment) -> pa.Table:
        path = self.store.local_path(segment.key)
        try:
            if path is not None:
                table = pq.read_table(path, schema=self.schema)
            else:
                table = pq.read_table(io.BytesIO(self.store.get(segment.key)), schema=self.schema)
        except (OSError, pa.ArrowException) as exc:
            raise SourceCorrupt(f"segment {segment.key!r} is unreadable: {exc}") from exc
        if table.num_rows != segment.count:
            raise SourceCorrupt(
                f"segment {segment.key!r} has {table.num_rows} rows, expected {segment.count}"
            )
        return table

    def read(self, partition: int, from_offset: int = 0) -> pa.Table:
        """Every record of ``from_offset``'s generation with offset >= ``from_offset``, in
        offset order (exact replay)."""
        if from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, got {from_offset}")
        tables = [self.read_segment(s) for s in self.segments(partition, from_offset)]
        if not tables:
            return self.schema.empty_table()
        table = pa.concat_tables(tables)
        head = tables[0]["offset"][0].as_py()
        if head < from_offset:
            table = table.slice(from_offset - head)
        return table


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _seal_routing(metadata: dict[bytes, bytes]) -> Routing | None:
    """The routing a seal's Parquet metadata names; None for a data segment."""
    if _SEALED_BY not in metadata:
        return None
    return Routing(
        generation=int(metadata[_SEALED_BY]), partitions=int(metadata[_SEALED_PARTITIONS])
    )


class Producer:
    """Routes records to partitions and appends them to the source log."""

    def __init__(self, store: ObjectStore, total_partitions: int | Sequence[int]) -> None:
        self.log = SourceLog(store, total_partitions)

    def produce(self, records: Iterable[tuple[str, float]]) -> dict[int, int]:
        """Append records; returns, per partition, the first offset given to this call's
        records in the newest generation the call wrote to.

        Order is kept within a partition. Each partition gets one segment per call, split
        into several only beyond SEGMENT_RECORDS_MAX (then another producer's segment may
        land between them; order is still kept). A partition sealed by a rescale makes the
        producer follow the seal to the next generation and route the records it has not
        appended yet by that generation, so each record lands once, below a cut or after it.
        """
        pending = [
            check_record(key, value, f"record {i}") for i, (key, value) in enumerate(records)
        ]
        firsts: dict[int, int] = {}
        for _ in range(SEALS_FOLLOWED_MAX + 1):
            try:
                self._append_all(pending, firsts)
                return firsts
            except _Rerouted as rerouted:
                pending = rerouted.remaining
                self.log = self.log.followed_by(rerouted.sealed.routing)
        raise StoreError(f"followed {SEALS_FOLLOWED_MAX} seals in one call; giving up")

    def _append_all(self, records: list[tuple[str, float]], firsts: dict[int, int]) -> None:
        routing = self.log.routing
        grouped: dict[int, list[tuple[str, float]]] = {}
        for record in records:
            grouped.setdefault(routing.partition_for(record[0]), []).append(record)
        for partition in sorted(grouped):
            batch = grouped[partition]
            for start in range(0, len(batch), SEGMENT_RECORDS_MAX):
                try:
                    first = self.log.append(partition, batch[start : start + SEGMENT_RECORDS_MAX])
                except SourceSealed as sealed:
                    rest = batch[start:] + [
                        r for p in sorted(grouped) if p > partition for r in grouped[p]
                    ]
                    raise _Rerouted(sealed, rest) from sealed
                if partition not in firsts or generation_of(firsts[partition]) < routing.generation:
                    firsts[partition] = first


class _Rerouted(Exception):
    """Inside `Producer.produce`: a seal stopped the appends; these records are still to go."""

    def __init__(self, sealed: SourceSealed, remaining: list[tuple[str, float]]) -> None:
        super().__init__(str(sealed))
        self.sealed = sealed
        self.remaining = remaining


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
