"""Incremental checkpoints of a partition's disk state: a BASE object (every row) and DELTA
objects (the rows upserted and the keys deleted since the previous checkpoint), and loading a
chain (a base and its deltas, in order) into a `StateStore`.

Owns the encoding and the compaction policy. An object is a msgpack stream: a header (format,
kind, its own (partition, epoch, offset), its parent's and its base's, its place in the chain),
frames of at most `FRAME_ROWS` entries `[key, value]` (a delete's value is nil), and a trailer
(the entry count and the SHA-256 of every byte before it). Each object is named by its own
(partition, epoch, offset), as `shared.checkpoint_ref.checkpoint_key` names a checkpoint, so
the coordinator's reference to the newest one is enough: the loader reads it and walks its
`parent` names back to the base (`header_of`).

Invariants: the bytes are deterministic (entries sorted by encoded key, maps with sorted keys),
so a retried write of the same checkpoint is byte-identical and create-only stays a no-op for
it; a chain loads only whole — a missing, reordered, foreign or corrupt object raises
`ChainBroken` before any row is written, so the caller falls back as for a lost checkpoint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from pipeline.spec.state_store import StateDelta, StateStore

__all__ = [
    "COMPACT_DELTAS_MAX",
    "COMPACT_DELTA_FRACTION",
    "DELTA_FORMAT_VERSION",
    "FRAME_ROWS",
    "ChainBroken",
    "ChainStats",
    "CheckpointId",
    "Header",
    "encode_base",
    "encode_delta",
    "header_of",
    "load",
]

DELTA_FORMAT_VERSION = 3  # after format 2, the whole-state spec checkpoint
FRAME_ROWS = 4096  # entries per frame: what encoding or loading holds at once
# A new base when the chain's deltas together pass this fraction of the base's bytes (a load
# reads at most 1.5x a base) or this many deltas (a load opens at most this many objects).
COMPACT_DELTA_FRACTION = 0.5
COMPACT_DELTAS_MAX = 32
BASE, DELTA = "base", "delta"
Entry = tuple[bytes, bytes | None]  # encoded key, encoded value or None for a delete


class ChainBroken(ValueError):
    """A chain that does not load: an object missing, out of order, of another chain, or
    corrupt. The caller treats it as a lost checkpoint (the fallback chain)."""


@dataclass(frozen=True, slots=True, order=True)
class CheckpointId:
    partition: int
    epoch: int
    offset: int

    def as_list(self) -> list[int]:
        return [self.partition, self.epoch, self.offset]


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    kind: str  # BASE or DELTA
    ident: CheckpointId
    parent: CheckpointId | None  # the previous checkpoint; None for a base
    base: CheckpointId  # the base this object's chain starts with (itself for a base)
    seq: int  # 0 for the base, then 1, 2, ... for its deltas


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainStats:
    """The chain the next checkpoint would extend; `needs_base` is the compaction policy."""

    base_bytes: int
    delta_bytes: int = 0
    deltas: int = 0

    def needs_base(self) -> bool:
        return (
            self.deltas >= COMPACT_DELTAS_MAX
            or self.delta_bytes > COMPACT_DELTA_FRACTION * self.base_bytes
        )

    def with_delta(self, size: int) -> ChainStats:
        return ChainStats(
            base_bytes=self.base_bytes, delta_bytes=self.delta_bytes + size, deltas=self.deltas + 1
        )


def _pack(doc: Any) -> bytes:
    return bytes(msgpack.packb(doc, use_bin_type=True))


def _objects(header: Header, entries: Iterable[Entry]) -> Iterator[bytes]:
    digest = hashlib.sha256()
    count = 0

    def out(piece: bytes) -> bytes:
        digest.update(piece)
        return piece

    head = {
        "v": DELTA_FORMAT_VERSION,
        "kind": header.kind,
        "id": header.ident.as_list(),
        "parent": None if header.parent is None else header.parent.as_list(),
        "base": header.base.as_list(),
        "seq": header.seq,
    }
    yield out(_pack({k: head[k] for k in sorted(head)}))
    frame: list[list[bytes | None]] = []
    last: bytes | None = None
    for key, value in entries:
        if last is not None and key <= last:
            raise ValueError("checkpoint entries must be in strictly ascending key order")
        last = key
        frame.append([key, value])
        count += 1
        if len(frame) == FRAME_ROWS:
            yield out(_pack(frame))
            frame = []
    if frame:
        yield out(_pack(frame))
    yield _pack({"rows": count, "sha256": digest.hexdigest()})


def encode_base(ident: CheckpointId, rows: Iterable[tuple[bytes, bytes]]) -> Iterator[bytes]:
    """A base of `rows` (encoded, in key order: `StateStore.raw_rows`), piece by piece; each
    piece is at most one frame, so writing it streams in bounded memory."""
    header = Header(kind=BASE, ident=ident, parent=None, base=ident, seq=0)
    return _objects(header, rows)


def encode_delta(ident: CheckpointId, parent: Header, delta: StateDelta) -> Iterator[bytes]:
    """The delta after `parent` (the previous checkpoint's header, a base or a delta), piece
    by piece as `encode_base`."""
    if ident <= parent.ident or ident.partition != parent.ident.partition:
        raise ValueError(f"a delta {ident} must come after its parent {parent.ident}")
    header = Header(
        kind=DELTA, ident=ident, parent=parent.ident, base=parent.base, seq=parent.seq + 1
    )
    return _objects(header, delta.entries())


def _ident(raw: Any) -> CheckpointId:
    partition, epoch, offset = (int(x) for x in raw)
    return CheckpointId(partition, epoch, offset)


def _header(doc: Any) -> Header:
    if not isinstance(doc, dict) or doc.get("v") != DELTA_FORMAT_VERSION:
        raise ChainBroken("not an incremental checkpoint (format 3)")
    if doc["kind"] not in (BASE, DELTA):
        raise ChainBroken(f"unknown checkpoint kind {doc['kind']!r}")
    parent = None if doc["parent"] is None else _ident(doc["parent"])
    return Header(
        kind=doc["kind"],
        ident=_ident(doc["id"]),
        parent=parent,
        base=_ident(doc["base"]),
        seq=int(doc["seq"]),
    )


def header_of(data: bytes) -> Header:
    """The header alone (cheap): how a loader walks from the newest object to its base."""
    try:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data[:1024])
        return _header(next(unpacker))
    except ChainBroken:
        raise
    except (StopIteration, ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise ChainBroken(f"a checkpoint header does not decode: {exc}") from exc


def _frames(data: bytes) -> tuple[Header, Iterator[list[Entry]]]:
    """The header and the frames of a whole, checked object (checked before it returns)."""
    try:
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
        unpacker.feed(data)
        header = _header(next(unpacker))
        count, before = 0, unpacker.tell()
        trailer: Any = None
        last: bytes | None = None
        for doc in unpacker:
            if trailer is not None:
                raise ChainBroken("bytes after a checkpoint's trailer")
            if isinstance(doc, dict):
                trailer = doc
                continue
            for key, value in doc:
                if last is not None and key <= last:
                    raise ChainBroken(f"checkpoint {header.ident} has its keys out of order")
                if value is None and header.kind == BASE:
                    raise ChainBroken(f"base {header.ident} deletes a key")
                last = key
            count += len(doc)
            before = unpacker.tell()
        if trailer is None:
            raise ChainBroken("a checkpoint without its trailer (cut short)")
        if trailer.get("sha256") != hashlib.sha256(data[:before]).hexdigest():
            raise ChainBroken(f"checkpoint {header.ident} fails its checksum")
        if trailer.get("rows") != count:
            raise ChainBroken(f"checkpoint {header.ident} has {count} rows, not {trailer['rows']}")
    except ChainBroken:
        raise
    except (StopIteration, ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise ChainBroken(f"a checkpoint does not decode: {exc}") from exc

    def frames() -> Iterator[list[Entry]]:
        again = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
        again.feed(data)
        next(again)
        for doc in again:
            if isinstance(doc, list):
                yield [(bytes(k), None if v is None else bytes(v)) for k, v in doc]

    return header, frames()


def load(chain: Sequence[bytes], into: StateStore) -> Header:
    """Load a base and its deltas (oldest first) into the empty `into`; the newest header.

    Every object is checked (decoding, checksum, order, lineage) before the first row is
    written; afterwards `into` has no dirty marks: the next delta is relative to this chain."""
    if not chain:
        raise ChainBroken("an empty chain has no base")
    if into.count():
        raise ValueError("a chain loads into an empty store only")
    checked = [_frames(data) for data in chain]
    base = checked[0][0]
    if base.kind != BASE:
        raise ChainBroken(f"the chain starts with a {base.kind}, not a base: {base.ident}")
    previous = base
    for header, _ in checked[1:]:
        if header.kind != DELTA or header.base != base.ident:
            raise ChainBroken(f"{header.ident} is not a delta of base {base.ident}")
        if header.parent != previous.ident or header.seq != previous.seq + 1:
            raise ChainBroken(f"a delta is missing between {previous.ident} and {header.ident}")
        previous = header
    _, base_frames = checked[0]
    for frame in base_frames:  # checked: keys ascending, none deleted, the store empty
        into.append_new([(k, v) for k, v in frame if v is not None])
    for _, frames in checked[1:]:
        for frame in frames:
            upserts = [(k, v) for k, v in frame if v is not None]
            into.apply(upserts, [k for k, v in frame if v is None])
    into.take_delta()
    return previous
