"""Group commit's envelope: many opaque entries in ONE replicated log entry, results likewise.

Owns only the byte layout; `replication.group_commit` decides what goes into a batch. Invariants:

- A batch starts with ``BATCH_MAGIC``, whose first byte 0xC1 is the one byte msgpack never
  produces, so no machine entry in msgpack (and no empty barrier) can be taken for a batch:
  a journal of single entries replays unchanged.
- Items keep their order and their own bytes; an empty item is a barrier (ordering only).
- Decoding is total over well-formed input and raises `BatchFormatError` on anything else,
  never reading past the buffer.

Layout (little-endian): ``MAGIC | count:u32 | (length:u32 | bytes){count}``. The results of
a batch use the same layout under ``RESULTS_MAGIC``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "BATCH_MAGIC",
    "RESULTS_MAGIC",
    "BatchFormatError",
    "decode_batch",
    "decode_results",
    "encode_batch",
    "encode_results",
    "is_batch",
]

BATCH_MAGIC = b"\xc1RB1"
RESULTS_MAGIC = b"\xc1RR1"
ITEMS_MAX = 65_536  # far above any configured batch; bounds what a decoder will allocate

_U32 = struct.Struct("<I")


class BatchFormatError(ValueError):
    """Bytes that claim to be a batch but are not a well-formed one."""


def is_batch(entry: bytes) -> bool:
    return entry[:4] == BATCH_MAGIC


def _encode(magic: bytes, items: Sequence[bytes]) -> bytes:
    if len(items) > ITEMS_MAX:
        raise BatchFormatError(f"{len(items)} items; at most {ITEMS_MAX}")
    parts = [magic, _U32.pack(len(items))]
    for item in items:
        parts.append(_U32.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def _decode(magic: bytes, data: bytes) -> list[bytes]:
    if data[:4] != magic:
        raise BatchFormatError("not a batch")
    if len(data) < 8:
        raise BatchFormatError("truncated count")
    (count,) = _U32.unpack_from(data, 4)
    if count > ITEMS_MAX:
        raise BatchFormatError(f"{count} items; at most {ITEMS_MAX}")
    items: list[bytes] = []
    offset = 8
    for i in range(count):
        if offset + 4 > len(data):
            raise BatchFormatError(f"item {i}: truncated length")
        (size,) = _U32.unpack_from(data, offset)
        offset += 4
        if offset + size > len(data):
            raise BatchFormatError(f"item {i}: {size} bytes claimed, {len(data) - offset} left")
        items.append(data[offset : offset + size])
        offset += size
    if offset != len(data):
        raise BatchFormatError(f"{len(data) - offset} bytes after the last item")
    return items


def encode_batch(entries: Sequence[bytes]) -> bytes:
    return _encode(BATCH_MAGIC, entries)


def decode_batch(data: bytes) -> list[bytes]:
    return _decode(BATCH_MAGIC, data)


def encode_results(results: Sequence[bytes]) -> bytes:
    return _encode(RESULTS_MAGIC, results)


def decode_results(data: bytes) -> list[bytes]:
    return _decode(RESULTS_MAGIC, data)
