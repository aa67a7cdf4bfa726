"""The byte formats of the replicated log, its results and its snapshots (msgpack).

Owns every byte that crosses the replication boundary. Encoding is deterministic (fields in
declared order, enums as their str value, tuples as arrays), so the same command is the same
bytes on every node and in the golden tests. Decoding trusts nothing: any malformed input
raises ``CodecError`` (a ``ValueError``) naming the offending field, never anything else.

Command envelope: ``[FORMAT_VERSION, TAG, request_id, {field: value, ...}]``.
Result: ``[FORMAT_VERSION, "ok", value]`` or
``[FORMAT_VERSION, "rejected", code, message, status, field]``; an Ok's typed value is a map
whose ordered keys name its type (see ``_RESULT_SHAPES``).
State: a map, see ``encode_state``; keys added since the first format trail it and are
written only when used, so an older state keeps its bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar, cast, get_args

import msgpack

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    COMMAND_BY_TAG,
    AbortResult,
    Assignment,
    AssignResult,
    BackupResult,
    BarrierResult,
    BootstrapResult,
    CheckpointReport,
    CheckpointsResult,
    CheckpointVerdict,
    Command,
    CommandResult,
    DeclareDeadResult,
    DrainResult,
    FallBackResult,
    FinalCheckpoint,
    FinalizeResult,
    HandOffResult,
    Move,
    NewMigration,
    Ok,
    OnlineResult,
    PlanResult,
    RegisterResult,
    Rejected,
    ReleaseResult,
    ReportResult,
    ResetResult,
    Result,
    Returns,
    StuckResult,
)
from coordinator.core.model import (
    ADDRESS_LEN_MAX,
    BATCH_ITEMS_MAX,
    CHECKPOINTS_KEPT_MAX,
    FIRST_COMMAND_SET_VERSION,
    HISTORY_PER_PARTITION_MAX,
    INT_VALUE_MAX,
    NODE_VERSIONS_MAX,
    NONCE_LEN_MAX,
    NOTE_LEN_MAX,
    PACKAGE_VERSION_LEN_MAX,
    REQUEST_ID_LEN_MAX,
    SHA256_HEX_LEN,
    TOTAL_PARTITIONS_MAX,
    URI_LEN_MAX,
    BackupRecord,
    ChangeReason,
    Checkpoint,
    Epoch,
    Migration,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    NodeVersions,
    OwnershipChange,
    Partition,
    PartitionId,
    PartitionStatus,
    Worker,
    WorkerId,
    WorkerState,
    valid_id,
)

__all__ = [
    "FORMAT_VERSION",
    "CodecError",
    "NewerCommandError",
    "decode_command",
    "decode_result",
    "decode_state",
    "encode_command",
    "encode_result",
    "encode_state",
]

FORMAT_VERSION = 1
# A snapshot holds at most TOTAL_PARTITIONS_MAX partitions with bounded histories; one log
# entry at most BATCH_ITEMS_MAX items. These caps stop a hostile entry from allocating more.
_ENTRY_BYTES_MAX = 64 * 1024 * 1024
_STATE_BYTES_MAX = 2 * 1024 * 1024 * 1024


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


# Field names of each dataclass `_plain` has met, in declared order: `dataclasses.fields`
# builds a tuple on every call, which the leader's event loop pays for every registration.
# One entry per dataclass in the code, so it is bounded by the code.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
# Field values msgpack takes as they are (most of a command's fields): returned before the
# Enum, sequence and dataclass checks, which would otherwise run on every field.
_SCALAR_TYPES = frozenset({str, int, float, bool, bytes, type(None)})


def _plain(value: object) -> object:
    """Commands and records as msgpack-ready plain data, fields in declared order."""
    if type(value) in _SCALAR_TYPES:
        return value
    names = _FIELD_NAMES.get(type(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        _FIELD_NAMES[type(value)] = tuple(f.name for f in fields(value))
        return _plain(value)
    return value


def _pack(obj: object) -> bytes:
    return cast(bytes, msgpack.packb(obj, use_bin_type=True))


def _unpack(data: bytes, limit: int) -> object:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError("expected bytes")
    if len(data) > limit:
        raise CodecError(f"entry larger than {limit} bytes")
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types (ExtraData, ValueError, StackError...)
        raise CodecError(f"bad msgpack: {type(exc).__name__}") from exc


def encode_command(cmd: Returns[Any], request_id: str) -> bytes:
    return _pack([FORMAT_VERSION, cmd.TAG, request_id, _plain(cmd)])


# --- decoding primitives -----------------------------------------------------------------------

_T = TypeVar("_T")
# `where` names the value in error messages ("entries[2].uri"). None is the fast pass of
# decode_command: no path is built (formatting one per field was most of a command's decode
# on every replica's apply), and a CodecError from it is dropped and the value decoded again
# with paths, to name the field at fault.
_Where = str | None
_Decoder = Callable[[object, _Where], Any]


def _int(value: object, where: _Where) -> int:
    # bool is an int subclass in Python; True is not a partition number.
    if type(value) is not int:
        raise CodecError(f"{where} must be an integer", where)
    if not 0 <= value <= INT_VALUE_MAX:
        raise CodecError(f"{where} must be in 0..{INT_VALUE_MAX}", where)
    return value


def _str(limit: int, *, empty_ok: bool = True) -> _Decoder:
    def decode(value: object, where: _Where) -> str:
        if not isinstance(value, str):
            raise CodecError(f"{where} must be a string", where)
        if len(value) > limit or (not empty_ok and not value):
            raise CodecError(f"{where} must be {0 if empty_ok else 1}..{limit} chars", where)
        return value

    return decode


def _worker_id(value: object, where: _Where) -> WorkerId:
    if not valid_id(value):
        raise CodecError(f"{where} must match [A-Za-z0-9._-]{{1,64}}", where)
    return WorkerId(cast(str, value))


def _migration_id(value: object, where: _Where) -> MigrationId:
    if not valid_id(value):
        raise CodecError(f"{where} must match [A-Za-z0-9._-]{{1,64}}", where)
    return MigrationId(cast(str, value))


def _partition_id(value: object, where: _Where) -> PartitionId:
    return PartitionId(_int(value, where))


def _epoch(value: object, where: _Where) -> Epoch:
    return Epoch(_int(value, where))


def _optional(inner: _Decoder) -> _Decoder:
    def decode(value: object, where: _Where) -> Any:
        return None if value is None else inner(value, where)

    return decode


def _enum(cls: type[Enum]) -> _Decoder:
    by_value = {member.value: member for member in cls}

    def decode(value: object, where: _Where) -> Enum:
        if not isinstance(value, str) or value not in by_value:
            raise CodecError(f"{where} must be one of {sorted(by_value)}", where)
        return by_value[value]

    return decode


def _array(inner: _Decoder, limit: int = BATCH_ITEMS_MAX) -> _Decoder:
    def decode(value: object, where: _Where) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise CodecError(f"{where} must be an array", where)
        if len(value) > limit:
            raise CodecError(f"{where} has more than {limit} items", where)
        if where is None:
            return tuple([inner(v, None) for v in value])
        return tuple(inner(v, f"{where}[{i}]") for i, v in enumerate(value))

    return decode


def _record(cls: type[_T], spec: dict[str, _Decoder]) -> Callable[[object, _Where], _T]:
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    assert names == list(spec), f"decoder spec of {cls.__name__} must list its fields in order"
    spec_keys = spec.keys()
    items = tuple(spec.items())

    def decode(value: object, where: _Where) -> _T:
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


# --- command specs -----------------------------------------------------------------------------

_assignment = _record(Assignment, {"partition": _partition_id, "owner": _optional(_worker_id)})
_move = _record(Move, {"partition": _partition_id, "source": _worker_id, "target": _worker_id})
_checkpoint_report = _record(
    CheckpointReport,
    {"partition": _int, "epoch": _int, "offset": _int, "uri": _str(URI_LEN_MAX)},
)
_final_checkpoint = _record(
    FinalCheckpoint, {"offset": _int, "uri": _str(URI_LEN_MAX), "epoch": _epoch}
)

_COMMAND_SPECS: dict[int, dict[str, _Decoder]] = {
    1: {"total_partitions": _int, "now_ms": _int},
    2: {
        "worker_id": _worker_id,
        "address": _str(ADDRESS_LEN_MAX, empty_ok=False),
        "now_ms": _int,
    },
    3: {"worker_ids": _array(_worker_id), "assignments": _array(_assignment), "now_ms": _int},
    4: {"assignments": _array(_assignment), "now_ms": _int},
    5: {"partition": _partition_id, "epoch": _epoch, "owner": _worker_id, "now_ms": _int},
    6: {"moves": _array(_move), "reason": _enum(MigrationReason), "now_ms": _int},
    7: {"migration_id": _migration_id, "now_ms": _int},
    8: {
        "migration_id": _migration_id,
        "checkpoint": _optional(_final_checkpoint),
        "now_ms": _int,
    },
    9: {"migration_id": _migration_id, "note": _str(NOTE_LEN_MAX), "now_ms": _int},
    10: {
        "worker_id": _worker_id,
        "incarnation": _int,
        "entries": _array(_checkpoint_report),
        "now_ms": _int,
    },
    11: {"worker_id": _worker_id, "moves": _array(_move), "now_ms": _int},
    12: {"nonce": _str(NONCE_LEN_MAX)},
    13: {
        "partition": _partition_id,
        "epoch": _epoch,
        "checkpoint": _optional(_final_checkpoint),
        "note": _str(NOTE_LEN_MAX),
        "now_ms": _int,
    },
    14: {"partition": _partition_id, "epoch": _epoch, "note": _str(NOTE_LEN_MAX), "now_ms": _int},
    15: {"partition": _partition_id, "note": _str(NOTE_LEN_MAX), "now_ms": _int},
    16: {
        "node_id": _str(REQUEST_ID_LEN_MAX, empty_ok=False),
        "min_version": _int,
        "max_version": _int,
        "package_version": _str(PACKAGE_VERSION_LEN_MAX),
        "now_ms": _int,
    },
    17: {
        "version": _int,
        "voters": _array(_str(REQUEST_ID_LEN_MAX, empty_ok=False), NODE_VERSIONS_MAX),
        "now_ms": _int,
    },
    18: {
        "cluster_id": _str(REQUEST_ID_LEN_MAX, empty_ok=False),
        "applied_index": _int,
        "term": _int,
        "sha256": _str(SHA256_HEX_LEN, empty_ok=False),
        "size_bytes": _int,
        "created_at_ms": _int,
        "now_ms": _int,
    },
    23: {"migration_id": _migration_id, "now_ms": _int},
}
assert _COMMAND_SPECS.keys() == COMMAND_BY_TAG.keys()
_COMMAND_DECODERS: dict[int, Callable[[object, _Where], Command]] = {
    tag: _record(COMMAND_BY_TAG[tag], spec) for tag, spec in _COMMAND_SPECS.items()
}


def decode_command(data: bytes) -> tuple[str, Command]:
    """``(request_id, command)`` from an entry; CodecError on anything malformed."""
    envelope = _unpack(data, _ENTRY_BYTES_MAX)
    if not isinstance(envelope, list) or len(envelope) != 4:
        raise CodecError("entry must be [version, tag, request_id, fields]")
    version, tag, request_id, body = envelope
    if type(version) is int and version > FORMAT_VERSION:
        raise NewerCommandError(f"unsupported format version {version!r}", "version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise CodecError(f"unsupported format version {version!r}", "version")
    if type(tag) is not int:
        raise CodecError("command tag must be an integer", "tag")
    decoder = _COMMAND_DECODERS.get(tag)
    if decoder is None:
        raise NewerCommandError(f"unknown command tag {tag}", "tag")
    if not isinstance(request_id, str) or not request_id or len(request_id) > REQUEST_ID_LEN_MAX:
        raise CodecError(
            f"request_id must be a string of 1..{REQUEST_ID_LEN_MAX} chars", "request_id"
        )
    try:
        return request_id, decoder(body, None)
    except CodecError:
        return request_id, decoder(body, "")  # again, naming the field at fault (_Where)


# --- results -----------------------------------------------------------------------------------
# An Ok's value is written as a map of its fields, under the keys below and in this order (a
# migration's source and target as "from" and "to"). The ordered keys name the type, so a
# result recorded in a snapshot's request table, which names no command, decodes to its type;
# no two types have the same keys (checked below).


def _bool(value: object, where: _Where) -> bool:
    if type(value) is not bool:
        raise CodecError(f"{where} must be a boolean", where)
    return value


def _choice(*allowed: str) -> _Decoder:
    def decode(value: object, where: _Where) -> str:
        if value not in allowed:
            raise CodecError(f"{where} must be one of {list(allowed)}", where)
        return value

    return decode


@dataclass(frozen=True, slots=True)
class _Shape:
    """A result type and its wire form: field ``names[i]`` is written under ``keys[i]``."""

    cls: type
    keys: tuple[str, ...]
    names: tuple[str, ...]
    decoders: tuple[_Decoder, ...]

    def decode(self, value: object, where: _Where) -> Any:
        if not isinstance(value, dict) or tuple(value) != self.keys:
            raise CodecError(f"{where} must be a map of {', '.join(self.keys)}", where)
        return self.cls(
            **{
                name: decoder(value[key], f"{where}.{key}")
                for key, name, decoder in zip(self.keys, self.names, self.decoders, strict=True)
            }
        )


def _shape(cls: type, spec: dict[str, _Decoder]) -> _Shape:
    names = tuple(f.name for f in fields(cls))
    assert len(names) == len(spec), f"wire keys of {cls.__name__} must match its fields"
    return _Shape(cls, tuple(spec), names, tuple(spec.values()))


_new_migration = _shape(
    NewMigration,
    {"id": _migration_id, "partition": _int, "from": _worker_id, "to": _worker_id},
)
_verdict = _shape(
    CheckpointVerdict,
    {
        "partition": _int,
        "status": _choice("accepted", "fenced"),
        "reason": _optional(_str(NOTE_LEN_MAX)),
    },
)
_partition_ids = _array(_int, TOTAL_PARTITIONS_MAX)
_migration_ids = _array(_migration_id, TOTAL_PARTITIONS_MAX)
_RESULT_SHAPES: tuple[_Shape, ...] = (
    _shape(BootstrapResult, {"total_partitions": _int, "created": _bool}),
    _shape(
        RegisterResult, {"worker_id": _worker_id, "incarnation": _int, "rehosted": _partition_ids}
    ),
    _shape(
        DeclareDeadResult,
        {
            "dead": _array(_worker_id),
            "reassigned": _int,
            "handed_off": _migration_ids,
            "aborted": _migration_ids,
        },
    ),
    _shape(AssignResult, {"assigned": _int}),
    _shape(
        OnlineResult,
        {
            "partition": _int,
            "epoch": _int,
            "changed": _bool,
            "migration_done": _optional(_migration_id),
            "left": _optional(_worker_id),
        },
    ),
    _shape(PlanResult, {"migrations": _array(_new_migration.decode)}),
    _shape(
        ReleaseResult,
        {"migration_id": _migration_id, "phase": _enum(MigrationPhase), "changed": _bool},
    ),
    _shape(
        HandOffResult,
        {
            "migration_id": _migration_id,
            "partition": _int,
            "owner": _optional(_worker_id),
            "epoch": _int,
            "checkpoint": _optional(_choice("final", "last_accepted")),
            "changed": _bool,
        },
    ),
    _shape(
        AbortResult,
        {"migration_id": _migration_id, "phase": _enum(MigrationPhase), "rehosted": _bool},
    ),
    _shape(CheckpointsResult, {"results": _array(_verdict.decode)}),
    _shape(
        DrainResult,
        {
            "worker_id": _worker_id,
            "state": _enum(WorkerState),
            "migrations": _array(_new_migration.decode),
        },
    ),
    _shape(BarrierResult, {"nonce": _str(NONCE_LEN_MAX)}),
    _shape(
        FallBackResult,
        {"partition": _int, "epoch": _int, "offset": _optional(_int), "earlier_left": _int},
    ),
    _shape(StuckResult, {"partition": _int, "stuck": _str(NOTE_LEN_MAX)}),
    _shape(ResetResult, {"partition": _int, "epoch": _int}),
    _shape(ReportResult, {"node_id": _str(REQUEST_ID_LEN_MAX), "finalized_version": _int}),
    _shape(FinalizeResult, {"finalized_version": _int, "changed": _bool}),
    _shape(BackupResult, {"applied_index": _int, "latest": _bool}),
)
_SHAPE_OF: dict[type, _Shape] = {
    shape.cls: shape for shape in (_new_migration, _verdict, *_RESULT_SHAPES)
}
_RESULT_SHAPE_BY_KEYS: dict[tuple[str, ...], _Shape] = {s.keys: s for s in _RESULT_SHAPES}
assert len(_RESULT_SHAPE_BY_KEYS) == len(_RESULT_SHAPES), "result keys must name one type"
assert set(get_args(CommandResult)) == {s.cls for s in _RESULT_SHAPES}


def _wire(value: object) -> object:
    """A result's value (or a field of one) as msgpack-ready plain data."""
    shape = _SHAPE_OF.get(type(value))
    if shape is not None:
        return {
            key: _wire(getattr(value, name))
            for key, name in zip(shape.keys, shape.names, strict=True)
        }
    if isinstance(value, tuple):
        return [_wire(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def _result_plain(result: Result) -> list[object]:
    if isinstance(result, Ok):
        return [FORMAT_VERSION, "ok", _wire(result.value)]
    return [FORMAT_VERSION, "rejected", result.code, result.message, result.status, result.field]


def _result_from_plain(obj: object) -> Result:
    if not isinstance(obj, list) or len(obj) < 2 or obj[0] != FORMAT_VERSION:
        raise CodecError("result must be [version, kind, ...]")
    if obj[1] == "ok" and len(obj) == 3 and isinstance(obj[2], dict):
        shape = _RESULT_SHAPE_BY_KEYS.get(tuple(obj[2]))
        if shape is None:
            raise CodecError(f"no result has the keys {list(obj[2])}", "value")
        value: CommandResult = shape.decode(obj[2], "value")
        return Ok(value=value)
    if obj[1] == "rejected" and len(obj) == 6:
        _, _, code, message, status, field = obj
        if (
            isinstance(code, str)
            and isinstance(message, str)
            and type(status) is int
            and (field is None or isinstance(field, str))
        ):
            return Rejected(code=code, message=message, status=status, field=field)
    raise CodecError("malformed result")


def encode_result(result: Result) -> bytes:
    return _pack(_result_plain(result))


def decode_result(data: bytes) -> Result:
    return _result_from_plain(_unpack(data, _STATE_BYTES_MAX))


# --- state (snapshots) -------------------------------------------------------------------------
# Records are arrays in declared field order, not maps: a snapshot of 100k partitions would
# otherwise spend most of its bytes repeating field names. Optional fields (a partition's
# earlier checkpoints and stuck reason, a history entry's note) are trailing elements written
# only when not empty: a state that does not use them encodes to the bytes of the format
# without them, and snapshots of that format decode.


def _checkpoint_plain(c: Checkpoint) -> list[object]:
    return [c.offset, c.uri, c.epoch, c.at_ms]


def _partition_plain(p: Partition) -> list[object]:
    history = [
        [h.epoch, h.owner, h.reason.value, h.at_ms, *([h.note] if h.note else [])]
        for h in p.history
    ]
    row: list[object] = [
        p.owner,
        p.epoch,
        p.status.value,
        p.migration,
        None if p.checkpoint is None else _checkpoint_plain(p.checkpoint),
        history,
    ]
    if p.earlier or p.stuck:
        row += [[_checkpoint_plain(c) for c in p.earlier], p.stuck]
    return row


def encode_state(state: ClusterState) -> bytes:
    return _pack(
        {
            "format": FORMAT_VERSION,
            "total_partitions": state.total_partitions,
            "generation": state.generation,
            "migration_seq": state.migration_seq,
            "workers": [
                [
                    w.worker_id,
                    w.address,
                    w.incarnation,
                    w.state.value,
                    w.registered_at_ms,
                    w.updated_at_ms,
                ]
                for w in state.workers.values()
            ],
            "partitions": [_partition_plain(p) for p in state.partitions],
            "migrations": [
                [
                    m.migration_id,
                    m.partition,
                    m.source,
                    m.target,
                    m.phase.value,
                    m.reason.value,
                    m.created_at_ms,
                    m.updated_at_ms,
                    m.note,
                ]
                for m in state.migrations.values()
            ],
            "requests": [[rid, _result_plain(r)] for rid, r in state.requests.items()],
            **_bookkeeping_plain(state),
        }
    )


def _bookkeeping_plain(state: ClusterState) -> dict[str, object]:
    """The cluster's records about itself, as trailing keys written only when in use: a
    state without them encodes to the bytes of the format before them."""
    out: dict[str, object] = {}
    if state.node_versions or state.finalized_version != FIRST_COMMAND_SET_VERSION:
        out["command_set"] = [
            state.finalized_version,
            [
                [n.node_id, n.min_version, n.max_version, n.package_version, n.reported_at_ms]
                for n in state.node_versions.values()
            ],
        ]
    b = state.last_backup
    if b is not None:
        out["last_backup"] = [
            b.cluster_id,
            b.applied_index,
            b.term,
            b.sha256,
            b.size_bytes,
            b.created_at_ms,
            b.recorded_at_ms,
        ]
    return out


def _tuple(value: object, n: int, where: _Where, *, optional: int = 0) -> list[object]:
    """An array of ``n`` elements, or of ``n + optional`` (trailing fields added later)."""
    if not isinstance(value, list) or len(value) not in (n, n + optional):
        sizes = f"{n}" if not optional else f"{n} or {n + optional}"
        raise CodecError(f"{where} must be an array of {sizes}", where)
    return value


def _decode_checkpoint(value: object, where: _Where) -> Checkpoint:
    offset, uri, epoch, at_ms = _tuple(value, 4, where)
    return Checkpoint(
        offset=_int(offset, where),
        uri=_str(URI_LEN_MAX)(uri, where),
        epoch=_epoch(epoch, where),
        at_ms=_int(at_ms, where),
    )


_worker_state = _enum(WorkerState)
_partition_status = _enum(PartitionStatus)
_phase = _enum(MigrationPhase)
_migration_reason = _enum(MigrationReason)
_change_reason = _enum(ChangeReason)
_opt_worker_id = _optional(_worker_id)
_opt_migration_id = _optional(_migration_id)


def _decode_partition(index: int, value: object) -> Partition:
    where = f"partitions[{index}]"
    row = _tuple(value, 6, where, optional=2)
    owner, epoch, status, migration, checkpoint, history = row[:6]
    earlier_raw, stuck = row[6:] if len(row) == 8 else ([], "")
    cp = None if checkpoint is None else _decode_checkpoint(checkpoint, f"{where}.checkpoint")
    earlier = _array(_decode_checkpoint, CHECKPOINTS_KEPT_MAX)(earlier_raw, f"{where}.earlier")
    changes: list[OwnershipChange] = []
    for h in _array(lambda v, w: v, HISTORY_PER_PARTITION_MAX)(history, f"{where}.history"):
        entry = _tuple(h, 4, f"{where}.history", optional=1)
        h_epoch, h_owner, h_reason, h_at = entry[:4]
        changes.append(
            OwnershipChange(
                epoch=_epoch(h_epoch, where),
                owner=_opt_worker_id(h_owner, where),
                reason=_change_reason(h_reason, where),
                at_ms=_int(h_at, where),
                note=_str(NOTE_LEN_MAX)(entry[4], where) if len(entry) == 5 else "",
            )
        )
    return Partition(
        partition=PartitionId(index),
        owner=_opt_worker_id(owner, where),
        epoch=_epoch(epoch, where),
        status=_partition_status(status, where),
        migration=_opt_migration_id(migration, where),
        checkpoint=cp,
        history=tuple(changes),
        earlier=earlier,
        stuck=_str(NOTE_LEN_MAX)(stuck, f"{where}.stuck"),
    )


def _decode_worker(value: object) -> Worker:
    wid, address, incarnation, state, registered, updated = _tuple(value, 6, "workers")
    return Worker(
        worker_id=_worker_id(wid, "workers"),
        address=_str(ADDRESS_LEN_MAX)(address, "workers"),
        incarnation=_int(incarnation, "workers"),
        state=_worker_state(state, "workers"),
        registered_at_ms=_int(registered, "workers"),
        updated_at_ms=_int(updated, "workers"),
    )


def _decode_migration(value: object) -> Migration:
    mid, partition, source, target, phase, reason, created, updated, note = _tuple(
        value, 9, "migrations"
    )
    return Migration(
        migration_id=_migration_id(mid, "migrations"),
        partition=_partition_id(partition, "migrations"),
        source=_worker_id(source, "migrations"),
        target=_worker_id(target, "migrations"),
        phase=_phase(phase, "migrations"),
        reason=_migration_reason(reason, "migrations"),
        created_at_ms=_int(created, "migrations"),
        updated_at_ms=_int(updated, "migrations"),
        note=_str(NOTE_LEN_MAX)(note, "migrations"),
    )


def decode_state(data: bytes) -> ClusterState:
    obj = _unpack(data, _STATE_BYTES_MAX)
    keys = [
        "format",
        "total_partitions",
        "generation",
        "migration_seq",
        "workers",
        "partitions",
        "migrations",
        "requests",
    ]
    if (
        not isinstance(obj, dict)
        or list(obj)[: len(keys)] != keys
        or not _in_order(list(obj)[len(keys) :], _BOOKKEEPING_KEYS)
    ):
        raise CodecError(
            "state must be a map of "
            + ", ".join(keys)
            + " (then, optionally, "
            + ", ".join(_BOOKKEEPING_KEYS)
            + ")"
        )
    if obj["format"] != FORMAT_VERSION or type(obj["format"]) is not int:
        raise CodecError(f"unsupported state format {obj['format']!r}", "format")
    state = ClusterState()
    state.total_partitions = _int(obj["total_partitions"], "total_partitions")
    state.generation = _int(obj["generation"], "generation")
    state.migration_seq = _int(obj["migration_seq"], "migration_seq")
    for value in _list(obj["workers"], "workers"):
        w = _decode_worker(value)
        state.workers[w.worker_id] = w
    state.partitions = [
        _decode_partition(i, v) for i, v in enumerate(_list(obj["partitions"], "partitions"))
    ]
    if len(state.partitions) != state.total_partitions:
        raise CodecError("partition count does not match total_partitions", "partitions")
    for value in _list(obj["migrations"], "migrations"):
        m = _decode_migration(value)
        state.migrations[m.migration_id] = m
    requests: OrderedDict[str, Result] = OrderedDict()
    for value in _list(obj["requests"], "requests"):
        rid, result = _tuple(value, 2, "requests")
        requests[_str(REQUEST_ID_LEN_MAX)(rid, "requests")] = _result_from_plain(result)
    state.requests = requests
    if "command_set" in obj:
        _decode_command_set(state, obj["command_set"])
    if "last_backup" in obj:
        state.last_backup = _decode_backup(obj["last_backup"])
    state.reindex()
    return state


_BOOKKEEPING_KEYS = ("command_set", "last_backup")


def _in_order(present: list[object], allowed: tuple[str, ...]) -> bool:
    """`present` is some of `allowed`, each at most once, in `allowed`'s order."""
    positions = [allowed.index(k) for k in present if isinstance(k, str) and k in allowed]
    return len(positions) == len(present) and positions == sorted(set(positions))


def _decode_command_set(state: ClusterState, value: object) -> None:
    finalized, records = _tuple(value, 2, "command_set")
    state.finalized_version = _int(finalized, "command_set")
    for row in _array(lambda v, w: v, NODE_VERSIONS_MAX)(records, "command_set"):
        node_id, low, high, package, at_ms = _tuple(row, 5, "command_set")
        record = NodeVersions(
            node_id=_worker_id(node_id, "command_set"),
            min_version=_int(low, "command_set"),
            max_version=_int(high, "command_set"),
            package_version=_str(PACKAGE_VERSION_LEN_MAX)(package, "command_set"),
            reported_at_ms=_int(at_ms, "command_set"),
        )
        state.node_versions[record.node_id] = record


def _decode_backup(value: object) -> BackupRecord:
    cluster_id, index, term, sha, size, created, recorded = _tuple(value, 7, "last_backup")
    return BackupRecord(
        cluster_id=_str(REQUEST_ID_LEN_MAX, empty_ok=False)(cluster_id, "last_backup"),
        applied_index=_int(index, "last_backup"),
        term=_int(term, "last_backup"),
        sha256=_str(SHA256_HEX_LEN, empty_ok=False)(sha, "last_backup"),
        size_bytes=_int(size, "last_backup"),
        created_at_ms=_int(created, "last_backup"),
        recorded_at_ms=_int(recorded, "last_backup"),
    )


def _list(value: object, where: _Where) -> list[object]:
    if not isinstance(value, list):
        raise CodecError(f"{where} must be an array", where)
    return value
