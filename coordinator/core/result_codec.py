"""The byte format of a replicated command's result (msgpack), recorded in the request table.

With coordinator/core/codec.py (the commands) and coordinator/core/snapshot.py (the state)
it owns every byte that crosses the replication boundary. Result:
``[FORMAT_VERSION, "ok", value]`` or ``[FORMAT_VERSION, "rejected", code, message, status,
field]``; an Ok's typed value is a map whose ordered keys name its type (see
``_RESULT_SHAPES``), so a result in a snapshot's request table, which names no command,
decodes to its type. A rejection's ``status`` is a legacy slot, written from the code
(``WIRE_STATUS_OF_CODE``) and never read for meaning. Decoding trusts nothing: malformed
input raises ``CodecError`` naming the field at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from operator import attrgetter
from typing import Any, cast, get_args

from coordinator.core.commands import (
    REJECT_CODES,
    AbortResult,
    AssignResult,
    BackupResult,
    BarrierResult,
    BootstrapResult,
    CheckpointsResult,
    CheckpointVerdict,
    CommandResult,
    CutResult,
    DeclareDeadResult,
    DrainResult,
    FallBackResult,
    FinalizeResult,
    HandOffResult,
    MaintenanceResult,
    NewMigration,
    Ok,
    OnlineResult,
    PipelineResult,
    PlanResult,
    ProfileResult,
    RegisterResult,
    RejectCode,
    Rejected,
    ReleaseResult,
    ReportResult,
    RescaleResult,
    ResetResult,
    Result,
    RetireResult,
    StuckResult,
    TokenResult,
)
from coordinator.core.model import (
    NONCE_LEN_MAX,
    NOTE_LEN_MAX,
    REQUEST_ID_LEN_MAX,
    TOKEN_ID_LEN_MAX,
    TOTAL_PARTITIONS_MAX,
    MigrationPhase,
    PipelineState,
    RescalePhase,
    WorkerState,
)
from coordinator.core.pipeline_fields import pipeline_name_value
from coordinator.core.wire_fields import (
    SCALAR_TYPES,
    STATE_BYTES_MAX,
    CodecError,
    Decoder,
    Where,
    array,
    bool_value,
    choice,
    enum_value,
    int_value,
    migration_id_value,
    optional,
    pack,
    str_value,
    unpack,
    wire_enum,
    worker_id_value,
)

__all__ = [
    "FORMAT_VERSION",
    "WIRE_STATUS_OF_CODE",
    "decode_result",
    "encode_result",
    "result_from_plain",
    "result_plain",
]

# The version of the command and result formats (the first element of both).
FORMAT_VERSION = 1


# --- results -----------------------------------------------------------------------------------
# An Ok's value is written as a map of its fields, under the keys below and in this order (a
# migration's source and target as "from" and "to"). The ordered keys name the type, so a
# result recorded in a snapshot's request table, which names no command, decodes to its type;
# no two types have the same keys (checked below).


@dataclass(frozen=True, slots=True)
class _Shape:
    """A result type and its wire form: each of ``items`` is a wire key, the field written
    under it and the field's decoder, in wire order; ``values`` reads the fields in that
    order. Both are built once: every write encodes a result and the leader decodes it."""

    cls: type
    keys: tuple[str, ...]
    items: tuple[tuple[str, str, Decoder], ...]
    values: Callable[[object], tuple[object, ...]]

    def decode(self, value: object, where: Where) -> Any:
        if not isinstance(value, dict) or tuple(value) != self.keys:
            raise CodecError(f"{where} must be a map of {', '.join(self.keys)}", where)
        if where is None:  # the fast pass (result_from_plain's, as decode_command's): no paths
            return self.cls(
                **{name: decoder(value[key], None) for key, name, decoder in self.items}
            )
        return self.cls(
            **{name: decoder(value[key], f"{where}.{key}") for key, name, decoder in self.items}
        )


def _shape(cls: type, spec: dict[str, Decoder]) -> _Shape:
    names = tuple(f.name for f in fields(cls))
    assert len(names) == len(spec), f"wire keys of {cls.__name__} must match its fields"
    items = tuple(zip(spec, names, spec.values(), strict=True))
    # attrgetter of one name answers the value itself, not a 1-tuple.
    values = attrgetter(*names) if len(names) > 1 else lambda v: (getattr(v, names[0]),)
    return _Shape(cls, tuple(spec), items, values)


_new_migration = _shape(
    NewMigration,
    {
        "id": migration_id_value,
        "partition": int_value,
        "from": worker_id_value,
        "to": worker_id_value,
    },
)
_verdict = _shape(
    CheckpointVerdict,
    {
        "partition": int_value,
        "status": choice("accepted", "fenced"),
        "reason": optional(str_value(NOTE_LEN_MAX)),
    },
)
_partition_ids = array(int_value, TOTAL_PARTITIONS_MAX)
_migration_ids = array(migration_id_value, TOTAL_PARTITIONS_MAX)
_RESULT_SHAPES: tuple[_Shape, ...] = (
    _shape(BootstrapResult, {"total_partitions": int_value, "created": bool_value}),
    _shape(
        RegisterResult,
        {"worker_id": worker_id_value, "incarnation": int_value, "rehosted": _partition_ids},
    ),
    _shape(
        DeclareDeadResult,
        {
            "dead": array(worker_id_value),
            "reassigned": int_value,
            "handed_off": _migration_ids,
            "aborted": _migration_ids,
        },
    ),
    _shape(AssignResult, {"assigned": int_value}),
    _shape(
        OnlineResult,
        {
            "partition": int_value,
            "epoch": int_value,
            "changed": bool_value,
            "migration_done": optional(migration_id_value),
            "left": optional(worker_id_value),
        },
    ),
    _shape(PlanResult, {"migrations": array(_new_migration.decode)}),
    _shape(
        ReleaseResult,
        {
            "migration_id": migration_id_value,
            "phase": enum_value(MigrationPhase),
            "changed": bool_value,
        },
    ),
    _shape(
        HandOffResult,
        {
            "migration_id": migration_id_value,
            "partition": int_value,
            "owner": optional(worker_id_value),
            "epoch": int_value,
            "checkpoint": optional(choice("final", "last_accepted")),
            "changed": bool_value,
        },
    ),
    _shape(
        AbortResult,
        {
            "migration_id": migration_id_value,
            "phase": enum_value(MigrationPhase),
            "rehosted": bool_value,
        },
    ),
    _shape(CheckpointsResult, {"results": array(_verdict.decode)}),
    _shape(
        DrainResult,
        {
            "worker_id": worker_id_value,
            "state": enum_value(WorkerState),
            "migrations": array(_new_migration.decode),
        },
    ),
    _shape(BarrierResult, {"nonce": str_value(NONCE_LEN_MAX)}),
    _shape(
        FallBackResult,
        {
            "partition": int_value,
            "epoch": int_value,
            "offset": optional(int_value),
            "earlier_left": int_value,
        },
    ),
    _shape(StuckResult, {"partition": int_value, "stuck": str_value(NOTE_LEN_MAX)}),
    _shape(ResetResult, {"partition": int_value, "epoch": int_value}),
    _shape(
        ReportResult, {"node_id": str_value(REQUEST_ID_LEN_MAX), "finalized_version": int_value}
    ),
    _shape(FinalizeResult, {"finalized_version": int_value, "changed": bool_value}),
    _shape(BackupResult, {"applied_index": int_value, "latest": bool_value}),
    _shape(RetireResult, {"retired": int_value, "kept": int_value, "incarnation_floor": int_value}),
    _shape(MaintenanceResult, {"maintenance": bool_value, "changed": bool_value}),
    _shape(
        RescaleResult,
        {
            "generation": int_value,
            "partitions": int_value,
            "previous": int_value,
            "phase": enum_value(RescalePhase),
        },
    ),
    _shape(
        CutResult,
        {
            "partition": int_value,
            "status": choice("accepted", "fenced"),
            "phase": enum_value(RescalePhase),
        },
    ),
    _shape(
        ProfileResult,
        {"worker_id": worker_id_value, "incarnation": int_value, "changed": bool_value},
    ),
    _shape(
        PipelineResult,
        {
            "pipeline": pipeline_name_value,
            "incarnation": int_value,
            "state": optional(enum_value(PipelineState)),
            "spec_version": int_value,
            "changed": bool_value,
        },
    ),
    _shape(
        TokenResult,
        {
            "pipeline": pipeline_name_value,
            "token_id": str_value(TOKEN_ID_LEN_MAX),
            "issued": bool_value,
            "changed": bool_value,
        },
    ),
)
_SHAPE_OF: dict[type, _Shape] = {
    shape.cls: shape for shape in (_new_migration, _verdict, *_RESULT_SHAPES)
}
_RESULT_SHAPE_BY_KEYS: dict[tuple[str, ...], _Shape] = {s.keys: s for s in _RESULT_SHAPES}
assert len(_RESULT_SHAPE_BY_KEYS) == len(_RESULT_SHAPES), "result keys must name one type"
assert set(get_args(CommandResult)) == {s.cls for s in _RESULT_SHAPES}


def _wire(value: object) -> object:
    """A result's value (or a field of one) as msgpack-ready plain data."""
    kind = type(value)
    if kind in SCALAR_TYPES:
        return value
    shape = _SHAPE_OF.get(kind)
    if shape is not None:
        return {
            key: v if type(v) in SCALAR_TYPES else _wire(v)
            for key, v in zip(shape.keys, shape.values(value), strict=True)
        }
    if isinstance(value, tuple):
        return [v if type(v) in SCALAR_TYPES else _wire(v) for v in value]
    if isinstance(value, Enum):
        return wire_enum(value)
    return value


# A rejection's fifth element. Releases before error kinds answered HTTP with it, and a mixed
# cluster's older nodes still do, so it is written as they wrote it: the same bytes in the
# request table (and snapshots) as before, the same answer from an old node as from a new one.
# The core gives it no meaning; tests/unit/test_error_statuses.py keeps it equal to what the
# HTTP edge answers for the code.
WIRE_STATUS_OF_CODE: dict[str, int] = {
    "invalid": 400,
    "not_found": 404,
    "conflict": 409,
    "stale_epoch": 409,
    "fenced": 409,
    "not_bootstrapped": 503,
    "version_not_finalized": 503,
    "version_unsupported": 409,
    "halted": 503,
    "rescale_in_flight": 409,
    "same_partition_count": 409,
    "not_online": 409,
    "rescaled": 409,
    "internal": 500,
}
assert set(WIRE_STATUS_OF_CODE) == REJECT_CODES, "every reject code has its legacy slot"


def result_plain(result: Result) -> list[object]:
    if isinstance(result, Ok):
        return [FORMAT_VERSION, "ok", _wire(result.value)]
    status = WIRE_STATUS_OF_CODE[result.code]
    return [FORMAT_VERSION, "rejected", result.code, result.message, status, result.field]


def result_from_plain(obj: object) -> Result:
    if not isinstance(obj, list) or len(obj) < 2 or obj[0] != FORMAT_VERSION:
        raise CodecError("result must be [version, kind, ...]")
    if obj[1] == "ok" and len(obj) == 3 and isinstance(obj[2], dict):
        shape = _RESULT_SHAPE_BY_KEYS.get(tuple(obj[2]))
        if shape is None:
            raise CodecError(f"no result has the keys {list(obj[2])}", "value")
        try:
            value: CommandResult = shape.decode(obj[2], None)
        except CodecError:
            value = shape.decode(obj[2], "value")  # again, naming the field at fault (Where)
        return Ok(value=value)
    if obj[1] == "rejected" and len(obj) == 6:
        _, _, code, message, status, field = obj
        if (
            isinstance(code, str)
            and code in REJECT_CODES
            and isinstance(message, str)
            and type(status) is int  # the legacy slot: checked, not kept
            and (field is None or isinstance(field, str))
        ):
            return Rejected(code=cast(RejectCode, code), message=message, field=field)
    raise CodecError("malformed result")


def encode_result(result: Result) -> bytes:
    return pack(result_plain(result))


def decode_result(data: bytes) -> Result:
    return result_from_plain(unpack(data, STATE_BYTES_MAX))
