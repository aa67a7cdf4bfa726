"""A partition's spec state on local disk: RocksDB (`rocksdict`), chosen in docs/state.md.

Owns one partition's store directory: its rows (encoded key -> encoded value, the codec of
`pipeline.spec.state_codec`), an exact row count, and the dirty marks a delta checkpoint is
taken from. Invariants:
- every write (`put_many`, `delete_many`, `apply`) changes the rows, the count and the dirty
  marks in one RocksDB write batch, so they never disagree, after a crash or a reopen too;
- `take_delta` returns exactly the keys upserted or deleted since the previous call, each with
  its value at that call or as deleted: under the lock the writes take, it closes the marks'
  generation and takes a snapshot, so a write after it lands in the next delta, never in none;
- rows iterate in the order of their encoded keys, from a snapshot (a base is consistent);
- what RocksDB holds in memory is set by the named constants below (block cache, memtables),
  per store, not by the rows: nothing here caches rows in Python, and a delta or a base
  streams from RocksDB. A taken `StateDelta` pins its snapshot (and keeps the database open)
  until it is dropped: drop it before `close`.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import rocksdict

from pipeline.spec.state_codec import pack_key, pack_value, unpack_key, unpack_value

__all__ = [
    "BLOCK_CACHE_BYTES",
    "WRITE_BUFFER_BYTES",
    "StateDelta",
    "StateStore",
    "StateStoreError",
    "engine_options",
]

BLOCK_CACHE_BYTES = 32 * 1024 * 1024  # decompressed blocks kept for reads, per partition
WRITE_BUFFER_BYTES = 16 * 1024 * 1024  # one memtable; RocksDB flushes it to a file when full
SMALL_WRITE_BUFFER_BYTES = 2 * 1024 * 1024  # the dirty-mark and count families' memtable
WRITE_BUFFERS_MAX = 2  # memtables at once (one filling, one flushing)
OPEN_FILES_MAX = 256  # table files kept open (each holds its index in memory)
BACKGROUND_JOBS = 2  # flush and compaction threads: the worker's cores run Spark too
# generation (8 bytes) + encoded key -> _UPSERT or _DELETE: a generation is the writes between
# two take_delta calls; only the open one is written to.
DIRTY_FAMILY = "dirty"
META_FAMILY = "meta"
_COUNT = b"count"
_GENERATION = b"generation"  # the dirty marks' generation being written; in meta
_UPSERT, _DELETE = b"u", b"d"

Row = tuple[bytes, bytes]  # encoded key, encoded value


class StateStoreError(Exception):
    """The store is closed, or its directory does not hold a state store."""


class StateDelta:
    """The change since the previous `take_delta`, in key order, read lazily: the marks of one
    closed generation (no write reaches them any more) and the values from the snapshot taken
    with them. Valid until the next `take_delta` (which drops these marks) or `close`; it can
    be read again meanwhile, with the same entries, so a retried encoding is identical."""

    __slots__ = ("_prefix", "_snapshot", "_store")

    def __init__(self, store: StateStore, prefix: bytes, snapshot: Any) -> None:
        self._store = store
        self._prefix = prefix
        self._snapshot = snapshot

    def entries(self) -> Iterator[tuple[bytes, bytes | None]]:
        """(encoded key, encoded value), or (encoded key, None) for a deleted key."""
        view = self._store._opened().dirty_view
        for mark_key, mark in cast(Iterator[Row], view.items(from_key=self._prefix)):
            if not mark_key.startswith(self._prefix):
                return
            key = mark_key[len(self._prefix) :]
            # An upsert mark means the row was there when the snapshot was taken.
            yield key, (cast(bytes, self._snapshot[key]) if mark == _UPSERT else None)

    def decoded(self) -> tuple[list[tuple[Any, Any]], list[Any]]:
        """(upserted rows, deleted keys), decoded: for tests and small deltas."""
        rows: list[tuple[Any, Any]] = []
        deletes: list[Any] = []
        for key, value in self.entries():
            if value is None:
                deletes.append(unpack_key(key))
            else:
                rows.append((unpack_key(key), unpack_value(value)))
        return rows, deletes


@dataclass(slots=True)
class _Open:
    """An open database and its column families (all released together on close)."""

    db: rocksdict.Rdict
    dirty: rocksdict.ColumnFamily
    meta: rocksdict.ColumnFamily
    dirty_view: rocksdict.Rdict
    meta_view: rocksdict.Rdict


def engine_options(cache: rocksdict.Cache | None = None) -> rocksdict.Options:
    """The bounded RocksDB options of a partition's store (the benchmark measures these); its
    column families share one block `cache`."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    opts.set_max_write_buffer_number(WRITE_BUFFERS_MAX)
    opts.set_max_open_files(OPEN_FILES_MAX)
    opts.set_max_background_jobs(BACKGROUND_JOBS)
    # LZ4: a state row is small, repetitive msgpack; cheap to compress, cheaper to read back.
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache or rocksdict.Cache(BLOCK_CACHE_BYTES))
    table.set_bloom_filter(10, False)  # a missing key (a new one) is answered without a read
    table.set_cache_index_and_filter_blocks(True)  # so they count within the cache's bound
    opts.set_block_based_table_factory(table)
    return opts


def _small(cache: rocksdict.Cache) -> rocksdict.Options:
    # The dirty marks and the count: small families, small memtables, the rows' cache.
    opts = engine_options(cache)
    opts.set_write_buffer_size(SMALL_WRITE_BUFFER_BYTES)
    return opts


def _families(cache: rocksdict.Cache) -> dict[str, rocksdict.Options]:
    return {DIRTY_FAMILY: _small(cache), META_FAMILY: _small(cache)}


def _multi_get(db: rocksdict.Rdict, keys: list[bytes]) -> list[bytes | None]:
    # One call for the batch (RocksDB's MultiGet); raw mode: bytes in, bytes or None out.
    if not keys:
        return []
    return cast(list[bytes | None], db.get(cast(Any, keys)))


class StateStore:
    """One partition's state in `directory`; one process opens it at a time (RocksDB's lock)."""

    def __init__(self, directory: Path, cache: rocksdict.Cache | None = None) -> None:
        self.directory = directory
        self._lock = threading.Lock()  # writes and take_delta: a delta is taken between writes
        try:
            # A worker's stores share its one `cache` (its bound is the worker's, not each
            # partition's); a store alone gets one of BLOCK_CACHE_BYTES.
            cache = cache or rocksdict.Cache(BLOCK_CACHE_BYTES)
            families = _families(cache)
            db = rocksdict.Rdict(str(directory), engine_options(cache), column_families=families)
        except Exception as exc:  # rocksdict raises bare Exceptions
            raise StateStoreError(f"cannot open the state store in {directory}: {exc}") from exc
        self._open: _Open | None = _Open(
            db=db,
            dirty=db.get_column_family_handle(DIRTY_FAMILY),
            meta=db.get_column_family_handle(META_FAMILY),
            dirty_view=db.get_column_family(DIRTY_FAMILY),
            meta_view=db.get_column_family(META_FAMILY),
        )
        raw = self._open.meta_view.get(_COUNT)
        self._count = 0 if raw is None else int.from_bytes(raw, "big")
        raw = self._open.meta_view.get(_GENERATION)
        self._generation = 0 if raw is None else int.from_bytes(raw, "big")

    @classmethod
    def open(cls, directory: Path, cache: rocksdict.Cache | None = None) -> StateStore:
        directory.mkdir(parents=True, exist_ok=True)
        return cls(directory, cache)

    def close(self) -> None:
        with self._lock:
            if self._open is None:
                return
            held, self._open = self._open, None
            # Every view and handle of a column family keeps RocksDB open: close the views,
            # then drop the last references, so the directory's lock is released now.
            held.dirty_view.close()
            held.meta_view.close()
            held.db.close()
            del held

    def destroy(self) -> None:
        """Close the store and delete its directory (the partition moved away)."""
        self.close()
        rocksdict.Rdict.destroy(str(self.directory), engine_options())
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _opened(self) -> _Open:
        if self._open is None:
            raise StateStoreError(f"the state store in {self.directory} is closed")
        return self._open

    # Reads.
    def count(self) -> int:
        self._opened()
        return self._count

    def get_many(self, keys: Sequence[Any]) -> dict[Any, Any]:
        """The found keys' values (a missing key is not in the answer)."""
        if not keys:
            return {}
        found = _multi_get(self._opened().db, [pack_key(k) for k in keys])
        return {k: unpack_value(v) for k, v in zip(keys, found, strict=True) if v is not None}

    def raw_get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Encoded values of encoded keys, None where missing (a read that decodes nothing)."""
        return _multi_get(self._opened().db, keys)

    def raw_rows(self) -> Iterator[Row]:
        """Every row, encoded, in key order, from a snapshot taken now."""
        snapshot = self._opened().db.snapshot()
        try:
            yield from cast(Iterator[Row], snapshot.items())
        finally:
            del snapshot

    def raw_rows_from(self, prefix: bytes) -> Iterator[Row]:
        """The rows whose encoded keys start with `prefix`, in key order, from a snapshot: a
        seek, then only those rows are read."""
        snapshot = self._opened().db.snapshot()
        try:
            for key, value in cast(Iterator[Row], snapshot.items(from_key=prefix)):
                if not key.startswith(prefix):
                    return
                yield key, value
        finally:
            del snapshot

    def rows(self) -> Iterator[tuple[Any, Any]]:
        for k, v in self.raw_rows():
            yield unpack_key(k), unpack_value(v)

    # Writes.
    def put_many(self, rows: Iterable[tuple[Any, Any]]) -> None:
        encoded = dict((pack_key(k), pack_value(v)) for k, v in rows)  # a later row wins
        self.apply(list(encoded.items()), [])

    def delete_many(self, keys: Iterable[Any]) -> None:
        self.apply([], [pack_key(k) for k in keys])

    def append_new(self, rows: Sequence[Row]) -> None:
        """Rows whose keys the store does not hold (a base loading into an empty store, its
        keys ascending and unique: `state_delta.load` checks both), written without a read and
        without dirty marks: a loaded checkpoint is no change since that checkpoint."""
        with self._lock:
            held = self._opened()
            batch = rocksdict.WriteBatch(raw_mode=True)
            for key, value in rows:
                batch.put(key, value)
            count = self._count + len(rows)
            batch.put(_COUNT, count.to_bytes(8, "big"), held.meta)
            held.db.write(batch)
            self._count = count

    def apply(self, upserts: Sequence[Row], deletes: Sequence[bytes]) -> None:
        """Upsert and delete encoded rows (deletes after upserts) in one batch, marked dirty."""
        with self._lock:
            held = self._opened()
            db = held.db
            deleting = set(deletes)
            touched = [k for k, _ in upserts if k not in deleting] + sorted(deleting)
            had = dict(zip(touched, _multi_get(db, touched), strict=True))
            batch = rocksdict.WriteBatch(raw_mode=True)
            count = self._count
            generation = _mark_prefix(self._generation)
            for key, value in upserts:
                if key in deleting:
                    continue
                batch.put(key, value)
                batch.put(generation + key, _UPSERT, held.dirty)
                count += had[key] is None
                had[key] = value
            for key in sorted(deleting):
                if had[key] is None:
                    continue  # deleting an absent key changes nothing: no mark
                batch.delete(key)
                batch.put(generation + key, _DELETE, held.dirty)
                count -= 1
            batch.put(_COUNT, count.to_bytes(8, "big"), held.meta)
            db.write(batch)
            self._count = count

    def take_delta(self) -> StateDelta:
        """What changed since the previous call (or since the store was created), and a new
        mark: the next call returns only what is written after this one. Nothing is read here:
        the delta streams (`StateDelta.entries`), so its size does not bound memory."""
        with self._lock:
            held = self._opened()
            closed = self._generation
            # The next generation's marks start now; the previous delta's are dropped (one
            # range tombstone, not one per key) - that delta is no longer readable.
            batch = rocksdict.WriteBatch(raw_mode=True)
            batch.put(_GENERATION, (closed + 1).to_bytes(8, "big"), held.meta)
            if closed > 0:
                batch.delete_range(_mark_prefix(0), _mark_prefix(closed), held.dirty)
            held.db.write(batch)
            self._generation = closed + 1
            snapshot = held.db.snapshot()  # under the lock: no write between it and the flip
        return StateDelta(self, _mark_prefix(closed), snapshot)


def _mark_prefix(generation: int) -> bytes:
    return generation.to_bytes(8, "big")
