"""Checkpoints (state + offset as one object) and dead-letter segments in the store.

Keys: ``checkpoints/p{partition:05d}/e{epoch:010d}-o{offset:020d}.ckpt`` (msgpack; named by
``shared.checkpoint_ref``, the same function the coordinator checks references
with) and
``deadletter/p{partition:05d}/e{epoch:010d}-o{from:020d}-{to:020d}.parquet`` (a windowed
pipeline's late records of that batch: ``...-{to:020d}-late.parquet``).

Invariant: a checkpoint object is written once and never changes, and its name, its
contents' header and its state agree. Writing the same checkpoint again (a retried request)
is a no-op only when the bytes are identical, which the deterministic encoding (keys sorted)
makes true for identical state; different bytes under the same name are an error. A new
owner reads exactly the URI the coordinator recorded, never "the newest object" (the newest
may come from a fenced, stale owner).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgpack
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.spec.partition_state import (
    SPEC_CHECKPOINT_FORMAT_VERSION,
    SpecCheckpoint,
    SpecCheckpointError,
    decode_spec_checkpoint,
)
from pipeline.state import KeyState, PartitionState
from pipeline.store import ObjectStore, StoreError
from shared.checkpoint_ref import checkpoint_key, checkpoint_key_parts

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "DEADLETTER_SCHEMA",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointData",
    "CheckpointStore",
    "checkpoint_key",
    "late_key",
]

CHECKPOINT_FORMAT_VERSION = 1
# Bounds what a checkpoint read will decode (checked before decoding); 2000 keys per
# partition are far below this.
CHECKPOINT_BYTES_MAX = 256 * 1024 * 1024

DEADLETTER_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("sum", pa.float64(), nullable=False),
        pa.field("min", pa.float64(), nullable=False),
        pa.field("max", pa.float64(), nullable=False),
        pa.field("last", pa.float64(), nullable=False),
        pa.field("last_offset", pa.int64(), nullable=False),
        pa.field("first_offset", pa.int64(), nullable=False),
    ]
)


class CheckpointConflict(StoreError):
    """A different object already exists under the checkpoint's (create-only) name."""


class CheckpointCorrupt(StoreError):
    """A checkpoint whose name, header or body do not agree or do not decode."""


class CheckpointData(NamedTuple):
    # A NamedTuple rather than a dataclass so callers can unpack it as the documented
    # ``offset, state, partition, epoch = read(uri)``.
    offset: int
    state: PartitionState
    partition: int
    epoch: int


def deadletter_key(partition: int, epoch: int, from_offset: int, to_offset: int) -> str:
    return f"deadletter/p{partition:05d}/e{epoch:010d}-o{from_offset:020d}-{to_offset:020d}.parquet"


def late_key(partition: int, epoch: int, from_offset: int, to_offset: int) -> str:
    """A batch's late records: its dead-letter object's name, `-late` before the suffix."""
    return deadletter_key(partition, epoch, from_offset, to_offset).removesuffix(".parquet") + (
        "-late.parquet"
    )


def encode(partition: int, epoch: int, offset: int, state: Mapping[str, KeyState]) -> bytes:
    rows = [
        [k, s.count, s.sum, s.min, s.max, s.last, s.last_offset, s.first_offset]
        for k, s in sorted(state.items())
    ]
    doc = {
        "v": CHECKPOINT_FORMAT_VERSION,
        "partition": partition,
        "epoch": epoch,
        "offset": offset,
        "keys": rows,
    }
    return bytes(msgpack.packb(doc, use_bin_type=True))


def decode(data: bytes) -> CheckpointData:
    try:
        # msgpack's result is untyped: every field is checked and converted below, and
        # anything else is CheckpointCorrupt.
        doc: Any = msgpack.unpackb(data, raw=False)
        if doc.get("v") != CHECKPOINT_FORMAT_VERSION:
            raise CheckpointCorrupt(f"unknown checkpoint format {doc.get('v')!r}")
        state: PartitionState = {}
        for k, count, total, lo, hi, last, last_offset, first_offset in doc["keys"]:
            state[str(k)] = KeyState(
                count=int(count),
                sum=float(total),
                min=float(lo),
                max=float(hi),
                last=float(last),
                last_offset=int(last_offset),
                first_offset=int(first_offset),
            )
        return CheckpointData(
            offset=int(doc["offset"]),
            state=state,
            partition=int(doc["partition"]),
            epoch=int(doc["epoch"]),
        )
    except CheckpointCorrupt:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException) as exc:
        raise CheckpointCorrupt(f"checkpoint does not decode: {exc}") from exc


def decode_any(data: bytes) -> CheckpointData | SpecCheckpoint:
    """A checkpoint of either format, as its header says."""
    try:
        doc: Any = msgpack.unpackb(data, raw=False, ext_hook=_any_ext)
        version = doc.get("v") if isinstance(doc, dict) else None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointCorrupt(f"checkpoint does not decode: {exc}") from exc
    if version != SPEC_CHECKPOINT_FORMAT_VERSION:
        return decode(data)
    try:
        return decode_spec_checkpoint(data)
    except SpecCheckpointError as exc:
        raise CheckpointCorrupt(str(exc)) from exc


def _any_ext(code: int, data: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(code, data)  # read only for the header here


class CheckpointStore:
    """Create-only checkpoints and dead-letter segments in one object store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _put_once(self, key: str, data: bytes) -> str:
        # A retried write of the same checkpoint finds its own bytes: that is success.
        if not self.store.put_if_absent(key, data) and self.store.get(key) != data:
            raise CheckpointConflict(f"{self.store.uri(key)} exists with different content")
        return self.store.uri(key)

    def write(self, partition: int, epoch: int, offset: int, state: Mapping[str, KeyState]) -> str:
        """Write the checkpoint and return its URI (what the coordinator records)."""
        return self.write_encoded(partition, epoch, offset, encode(partition, epoch, offset, state))

    def write_encoded(self, partition: int, epoch: int, offset: int, data: bytes) -> str:
        """Write a checkpoint already encoded (a recorded pipeline's, format 2)."""
        if partition < 0 or epoch < 0 or offset < 0:
            raise ValueError(f"bad checkpoint name p={partition} e={epoch} o={offset}")
        return self._put_once(checkpoint_key(partition, epoch, offset), data)

    def read(self, uri: str) -> CheckpointData:
        """Load exactly the checkpoint at ``uri`` (which must live in this store): one of
        `default`'s partitions'."""
        loaded = self.read_any(uri)
        if isinstance(loaded, SpecCheckpoint):
            raise CheckpointCorrupt(f"{uri!r} is a recorded pipeline's checkpoint")
        return loaded

    def read_any(self, uri: str) -> CheckpointData | SpecCheckpoint:
        """Load exactly the checkpoint at ``uri``: `default`'s format or a recorded
        pipeline's (format 2), as its header says."""
        return self.read_checked(uri)[1]

    def read_checked(self, uri: str) -> tuple[bytes, CheckpointData | SpecCheckpoint]:
        """The bytes of the checkpoint at ``uri`` (which must live in this store) and what
        they hold, checked to be what its name says."""
        base = self.store.uri("")
        if not uri.startswith(base):
            raise CheckpointCorrupt(f"checkpoint {uri!r} is not in the store {base!r}")
        key = uri[len(base) :]
        named = checkpoint_key_parts(key)
        if named is None:
            raise CheckpointCorrupt(f"{uri!r} is not a checkpoint name")
        data = self.store.get(key)
        if len(data) > CHECKPOINT_BYTES_MAX:
            raise CheckpointCorrupt(f"{uri!r} is larger than {CHECKPOINT_BYTES_MAX} bytes")
        loaded = decode_any(data)
        if (loaded.partition, loaded.epoch, loaded.offset) != named:
            held = (loaded.partition, loaded.epoch, loaded.offset)
            raise CheckpointCorrupt(f"{uri!r} names partition/epoch/offset {named}, holds {held}")
        return data, loaded

    def write_dead_letter(
        self,
        partition: int,
        epoch: int,
        from_offset: int,
        to_offset: int,
        rows: Mapping[str, KeyState],
    ) -> str:
        """Write the aggregates of keys refused by the key limit for offsets [from, to).

        The raw records stay in the source log, so these rows plus the offset range are
        enough to reprocess them once the limit is raised.
        """
        items = sorted(rows.items())
        table = pa.table(
            {
                "partition": pa.array([partition] * len(items), pa.int32()),
                "key": pa.array([k for k, _ in items], pa.string()),
                "count": pa.array([s.count for _, s in items], pa.int64()),
                "sum": pa.array([s.sum for _, s in items], pa.float64()),
                "min": pa.array([s.min for _, s in items], pa.float64()),
                "max": pa.array([s.max for _, s in items], pa.float64()),
                "last": pa.array([s.last for _, s in items], pa.float64()),
                "last_offset": pa.array([s.last_offset for _, s in items], pa.int64()),
                "first_offset": pa.array([s.first_offset for _, s in items], pa.int64()),
            },
            schema=DEADLETTER_SCHEMA,
        )
        sink = io.BytesIO()
        pq.write_table(table, sink)
        key = deadletter_key(partition, epoch, from_offset, to_offset)
        return self._put_once(key, sink.getvalue())

    def write_dead_letter_encoded(
        self, partition: int, epoch: int, from_offset: int, to_offset: int, data: bytes
    ) -> str:
        """Write a recorded pipeline's dead letters for offsets [from, to), already encoded."""
        return self._put_once(deadletter_key(partition, epoch, from_offset, to_offset), data)

    def write_late_encoded(
        self, partition: int, epoch: int, from_offset: int, to_offset: int, data: bytes
    ) -> str:
        """Write a windowed pipeline's late records of offsets [from, to), already encoded,
        beside that batch's key-limit dead letters (`late_key`)."""
        return self._put_once(late_key(partition, epoch, from_offset, to_offset), data)

    def dead_letter_keys(self, partition: int) -> list[str]:
        return self.store.list_keys(f"deadletter/p{partition:05d}/")
