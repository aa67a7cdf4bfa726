"""The msgpack primitives both codecs share (coordinator/core/codec.py for commands and
results, coordinator/core/snapshot.py for the state): deterministic packing of dataclasses in
declared field order, bounded unpacking, and the typed decoders that trust nothing and raise
``CodecError`` naming the offending field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar, cast

import msgpack

from coordinator.core.model import (
    BATCH_ITEMS_MAX,
    INT_VALUE_MAX,
    Epoch,
    MigrationId,
    PartitionId,
    RescalePhase,
    WorkerId,
    valid_id,
)

__all__ = [
    "ENTRY_BYTES_MAX",
    "SCALAR_TYPES",
    "STATE_BYTES_MAX",
    "WIRE_SPELLING",
    "CodecError",
    "Decoder",
    "NewerCommandError",
    "Where",
    "array",
    "bool_value",
    "choice",
    "enum_value",
    "epoch_value",
    "int_value",
    "list_value",
    "migration_id_value",
    "optional",
    "pack",
    "partition_id_value",
    "plain",
    "record",
    "str_value",
    "tuple_value",
    "unpack",
    "wire_enum",
    "worker_id_value",
]


# A snapshot holds at most TOTAL_PARTITIONS_MAX partitions with bounded histories; one log
# entry at most BATCH_ITEMS_MAX items. These caps stop a hostile entry from allocating more.
ENTRY_BYTES_MAX = 64 * 1024 * 1024
STATE_BYTES_MAX = 2 * 1024 * 1024 * 1024


class CodecError(ValueError):
    """Malformed bytes. ``field`` names the offending field when one is to blame."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NewerCommandError(CodecError):
    """A well-formed entry this code cannot read: a command tag it does not know, or an
    envelope format newer than FORMAT_VERSION. Only a newer release writes one, so a
    replica must not skip it as malformed (the others apply it): coordinator/core/machine.py
    halts on it."""


# --- encoding ----------------------------------------------------------------------------------

# Enum members whose bytes are not their value. RescalePhase entered the replicated state upper
# case; its values are lower case like every other enum's now, and its bytes stay as they were
# so the golden bytes hold and nodes of both spellings read each other. Every other member is
# written as its value.
WIRE_SPELLING: dict[Enum, str] = {
    RescalePhase.CUTTING: "CUTTING",
    RescalePhase.MOVING: "MOVING",
    RescalePhase.HOSTING: "HOSTING",
    RescalePhase.DONE: "DONE",
}


def wire_enum(member: Enum) -> str:
    """An enum member as its bytes spell it (see WIRE_SPELLING)."""
    spelled = WIRE_SPELLING.get(member, member.value)
    assert isinstance(spelled, str), f"{member!r}: every enum on the wire has str values"
    return spelled


# Field names of each dataclass `plain` has met, in declared order: `dataclasses.fields`
# builds a tuple on every call, which the leader's event loop pays for every registration.
# One entry per dataclass in the code, so it is bounded by the code.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
# Field values msgpack takes as they are (most of a command's or a result's fields): returned
# before the Enum, sequence and dataclass checks, which would otherwise run on every field.
SCALAR_TYPES = frozenset({str, int, float, bool, bytes, type(None)})


def plain(value: object) -> object:
    """Commands and records as msgpack-ready plain data, fields in declared order."""
    if type(value) in SCALAR_TYPES:
        return value
    names = _FIELD_NAMES.get(type(value))
    if names is not None:
        return {name: plain(getattr(value, name)) for name in names}
    if isinstance(value, Enum):
        return wire_enum(value)
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        _FIELD_NAMES[type(value)] = tuple(f.name for f in fields(value))
        return plain(value)
    return value


def pack(obj: object) -> bytes:
    # msgpack.packb builds this Packer through a Python wrapper and **kwargs, on every entry
    # and result; one Packer per call, since more than one thread packs.
    packed: bytes = msgpack.Packer(use_bin_type=True).pack(obj)
    return packed


def unpack(data: bytes, limit: int) -> object:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError("expected bytes")
    if len(data) > limit:
        raise CodecError(f"entry larger than {limit} bytes")
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types (ExtraData, ValueError, StackError...)
        raise CodecError(f"bad msgpack: {type(exc).__name__}") from exc


# --- decoding primitives -----------------------------------------------------------------------

_T = TypeVar("_T")
# `where` names the value in error messages ("entries[2].uri"). None is the fast pass of
# decode_command: no path is built (formatting one per field was most of a command's decode
# on every replica's apply), and a CodecError from it is dropped and the value decoded again
# with paths, to name the field at fault.
Where = str | None
Decoder = Callable[[object, Where], Any]


def int_value(value: object, where: Where) -> int:
    # bool is an int subclass in Python; True is not a partition number.
    if type(value) is not int:
        raise CodecError(f"{where} must be an integer", where)
    if not 0 <= value <= INT_VALUE_MAX:
        raise CodecError(f"{where} must be in 0..{INT_VALUE_MAX}", where)
    return value


def str_value(limit: int, *, empty_ok: bool = True) -> Decoder:
    def decode(value: object, where: Where) -> str:
        if not isinstance(value, str):
            raise CodecError(f"{where} must be a string", where)
        if len(value) > limit or (not empty_ok and not value):
            raise CodecError(f"{where} must be {0 if empty_ok else 1}..{limit} chars", where)
        return value

    return decode


def worker_id_value(value: object, where: Where) -> WorkerId:
    if not valid_id(value):
        raise CodecError(f"{where} must match [A-Za-z0-9._-]{{1,64}}", where)
    return WorkerId(cast(str, value))


def migration_id_value(value: object, where: Where) -> MigrationId:
    if not valid_id(value):
        raise CodecError(f"{where} must match [A-Za-z0-9._-]{{1,64}}", where)
    return MigrationId(cast(str, value))


def partition_id_value(value: object, where: Where) -> PartitionId:
    return PartitionId(int_value(value, where))


def epoch_value(value: object, where: Where) -> Epoch:
    return Epoch(int_value(value, where))


def optional(inner: Decoder) -> Decoder:
    def decode(value: object, where: Where) -> Any:
        return None if value is None else inner(value, where)

    return decode


def enum_value(cls: type[Enum]) -> Decoder:
    by_value = {wire_enum(member): member for member in cls}

    def decode(value: object, where: Where) -> Enum:
        if not isinstance(value, str) or value not in by_value:
            raise CodecError(f"{where} must be one of {sorted(by_value)}", where)
        return by_value[value]

    return decode


def array(inner: Decoder, limit: int = BATCH_ITEMS_MAX) -> Decoder:
    def decode(value: object, where: Where) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise CodecError(f"{where} must be an array", where)
        if len(value) > limit:
            raise CodecError(f"{where} has more than {limit} items", where)
        if where is None:
            return tuple([inner(v, None) for v in value])
        return tuple(inner(v, f"{where}[{i}]") for i, v in enumerate(value))

    return decode


def record(cls: type[_T], spec: dict[str, Decoder]) -> Callable[[object, Where], _T]:
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    assert names == list(spec), f"decoder spec of {cls.__name__} must list its fields in order"
    spec_keys = spec.keys()
    items = tuple(spec.items())

    def decode(value: object, where: Where) -> _T:
        if not isinstance(value, dict):
            raise CodecError(f"{where or cls.__name__} must be a map", where or None)
        if value.keys() != spec_keys:
            missing = [n for n in names if n not in value]
            if missing:
                field = f"{where}.{missing[0]}" if where else missing[0]
                raise CodecError(f"missing field {field}", field)
            extra = [k for k in value if k not in spec]
            field = f"{where}.{extra[0]}" if where else str(extra[0])
            raise CodecError(f"unknown field {field}", field)
        if where is None:
            return cls(**{name: dec(value[name], None) for name, dec in items})
        kwargs = {
            name: dec(value[name], f"{where}.{name}" if where else name) for name, dec in items
        }
        return cls(**kwargs)

    return decode


def bool_value(value: object, where: Where) -> bool:
    if type(value) is not bool:
        raise CodecError(f"{where} must be a boolean", where)
    return value


def choice(*allowed: str) -> Decoder:
    def decode(value: object, where: Where) -> str:
        if value not in allowed:
            raise CodecError(f"{where} must be one of {list(allowed)}", where)
        return value

    return decode


def list_value(value: object, where: Where) -> list[object]:
    if not isinstance(value, list):
        raise CodecError(f"{where} must be an array", where)
    return value


def tuple_value(value: object, n: int, where: Where, *, optional: int = 0) -> list[object]:
    """An array of ``n`` elements, or of ``n + optional`` (trailing fields added later)."""
    if not isinstance(value, list) or len(value) not in (n, n + optional):
        sizes = f"{n}" if not optional else f"{n} or {n + optional}"
        raise CodecError(f"{where} must be an array of {sizes}", where)
    return value
