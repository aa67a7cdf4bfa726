"""The bytes of a spec state's keys and values: msgpack with extensions for the column values
msgpack has no type of (Decimal, date, datetime).

Owns `pack_key`/`unpack_key` and `pack_value`/`unpack_value`, the encoding the disk state store
(`pipeline.spec.state_store`) and the incremental checkpoints (`pipeline.spec.state_delta`)
write. Invariant: deterministic — equal inputs give identical bytes (maps are written with
their keys sorted, ints in their shortest form), so a key has one encoding to look it up by and
a retried write of the same rows has the same bytes; and `unpack(pack(x)) == x` for every key
(None, bool, int, float, str, bytes, Decimal, date, datetime, tuples of these) and every state
value (ints, Decimals, datetimes, tuples, bytes sketches, dicts of them). The extension codes
are those of the format-2 checkpoint (`pipeline.spec.partition_state`), so one value decodes
the same under both: that module encodes with `ext_default`/`ext_hook`/`tupled` from here.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import msgpack

__all__ = [
    "EXT_DATE",
    "EXT_DATETIME",
    "EXT_DECIMAL",
    "StateCodecError",
    "ext_default",
    "ext_hook",
    "pack_key",
    "pack_value",
    "tupled",
    "unpack_key",
    "unpack_value",
]

# msgpack extension codes for the column values msgpack has no type of (format 2's).
EXT_DECIMAL = 1
EXT_DATE = 2
EXT_DATETIME = 3


class StateCodecError(ValueError):
    """Bytes that are not a state key or value, or a value that has no encoding."""


def ext_default(value: Any) -> Any:
    """msgpack's `default`: the extension of a Decimal, date or datetime."""
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(EXT_DECIMAL, str(value).encode())
    if isinstance(value, datetime.datetime):
        return msgpack.ExtType(EXT_DATETIME, value.isoformat().encode())
    if isinstance(value, datetime.date):
        return msgpack.ExtType(EXT_DATE, value.isoformat().encode())
    raise TypeError(f"a state value of type {type(value).__name__} has no encoding")


def ext_hook(code: int, data: bytes) -> Any:
    text = data.decode()
    if code == EXT_DECIMAL:
        return decimal.Decimal(text)
    if code == EXT_DATETIME:
        return datetime.datetime.fromisoformat(text)
    if code == EXT_DATE:
        return datetime.date.fromisoformat(text)
    raise StateCodecError(f"unknown value extension {code}")


def tupled(value: Any) -> Any:
    """Every list back to a tuple: no column value is a list (the DDL has no arrays), so each
    was a tuple (a key with its window, a mean's (sum, count), first/last's (offset, value))."""
    if isinstance(value, list):
        return tuple(tupled(v) for v in value)
    if isinstance(value, dict):
        return {k: tupled(v) for k, v in value.items()}
    return value


def _canonical(value: Any) -> Any:
    # msgpack writes a dict in iteration order: sort it, so equal dicts have equal bytes.
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def _pack(value: Any) -> bytes:
    try:
        return bytes(msgpack.packb(_canonical(value), use_bin_type=True, default=ext_default))
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateCodecError(f"no encoding for {value!r}: {exc}") from exc


def _unpack(data: bytes) -> Any:
    try:
        return tupled(msgpack.unpackb(data, raw=False, ext_hook=ext_hook, strict_map_key=False))
    except StateCodecError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StateCodecError(f"bytes do not decode: {exc}") from exc


def pack_key(key: Any) -> bytes:
    """A key's one encoding (the store's byte order is the order of these bytes)."""
    if isinstance(key, dict):
        raise StateCodecError("a state key cannot be a map")
    return _pack(key)


def unpack_key(data: bytes) -> Any:
    return _unpack(data)


def pack_value(value: Any) -> bytes:
    return _pack(value)


def unpack_value(data: bytes) -> Any:
    return _unpack(data)
