"""The byte format of the replicated log's commands (msgpack).

With coordinator/core/result_codec.py (their results) and coordinator/core/snapshot.py (the
state's snapshots) it owns every byte that crosses the replication boundary; the primitives
all three use are coordinator/core/wire_fields.py's. Encoding is deterministic (fields in
declared order, enums as their str value, tuples as arrays), so the same command is the same
bytes on every node and in the golden tests. Decoding trusts nothing: any malformed input
raises ``CodecError`` (a ``ValueError``) naming the offending field, never anything else.

Command envelope: ``[FORMAT_VERSION, TAG, request_id, {field: value, ...}]``. The result
functions are re-exported here, so a caller that encodes commands finds their results too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.core.commands import (
    COMMAND_BY_TAG,
    Assignment,
    BuiltCheckpoint,
    CheckpointReport,
    Command,
    FinalCheckpoint,
    Move,
    Returns,
)
from coordinator.core.model import (
    ADDRESS_LEN_MAX,
    MAINTENANCE_BY_LEN_MAX,
    NODE_VERSIONS_MAX,
    NONCE_LEN_MAX,
    NOTE_LEN_MAX,
    PACKAGE_VERSION_LEN_MAX,
    POOL_LABELS_MAX,
    REQUEST_ID_LEN_MAX,
    RESCALE_PARTITIONS_MAX,
    SHA256_HEX_LEN,
    SPEC_TEXT_BYTES_MAX,
    TOKEN_ID_LEN_MAX,
    URI_LEN_MAX,
    WORKER_LABELS_MAX,
    MigrationReason,
    TokenRole,
)
from coordinator.core.pipeline_fields import label_value, pipeline_name_value, settings_value
from coordinator.core.result_codec import (
    FORMAT_VERSION,
    decode_result,
    encode_result,
    result_from_plain,
    result_plain,
)
from coordinator.core.wire_fields import (
    ENTRY_BYTES_MAX,
    CodecError,
    Decoder,
    NewerCommandError,
    Where,
    array,
    bool_value,
    enum_value,
    epoch_value,
    int_value,
    migration_id_value,
    optional,
    pack,
    partition_id_value,
    plain,
    record,
    str_value,
    unpack,
    worker_id_value,
)

__all__ = [
    "FORMAT_VERSION",
    "CodecError",
    "NewerCommandError",
    "decode_command",
    "decode_result",
    "encode_command",
    "encode_result",
    "result_from_plain",
    "result_plain",
]


def encode_command(cmd: Returns[Any], request_id: str) -> bytes:
    return pack([FORMAT_VERSION, cmd.TAG, request_id, plain(cmd)])


# --- command specs -----------------------------------------------------------------------------

_assignment = record(
    Assignment, {"partition": partition_id_value, "owner": optional(worker_id_value)}
)
_move = record(
    Move, {"partition": partition_id_value, "source": worker_id_value, "target": worker_id_value}
)
_checkpoint_report = record(
    CheckpointReport,
    {
        "partition": int_value,
        "epoch": int_value,
        "offset": int_value,
        "uri": str_value(URI_LEN_MAX),
    },
)
_final_checkpoint = record(
    FinalCheckpoint, {"offset": int_value, "uri": str_value(URI_LEN_MAX), "epoch": epoch_value}
)
_built_checkpoint = record(
    BuiltCheckpoint, {"partition": int_value, "offset": int_value, "uri": str_value(URI_LEN_MAX)}
)

_token_id = str_value(TOKEN_ID_LEN_MAX, empty_ok=False)

_COMMAND_SPECS: dict[int, dict[str, Decoder]] = {
    1: {"total_partitions": int_value, "now_ms": int_value},
    2: {
        "worker_id": worker_id_value,
        "address": str_value(ADDRESS_LEN_MAX, empty_ok=False),
        "now_ms": int_value,
    },
    3: {
        "worker_ids": array(worker_id_value),
        "assignments": array(_assignment),
        "now_ms": int_value,
    },
    4: {"assignments": array(_assignment), "now_ms": int_value},
    5: {
        "partition": partition_id_value,
        "epoch": epoch_value,
        "owner": worker_id_value,
        "now_ms": int_value,
    },
    6: {"moves": array(_move), "reason": enum_value(MigrationReason), "now_ms": int_value},
    7: {"migration_id": migration_id_value, "now_ms": int_value},
    8: {
        "migration_id": migration_id_value,
        "checkpoint": optional(_final_checkpoint),
        "now_ms": int_value,
    },
    9: {"migration_id": migration_id_value, "note": str_value(NOTE_LEN_MAX), "now_ms": int_value},
    10: {
        "worker_id": worker_id_value,
        "incarnation": int_value,
        "entries": array(_checkpoint_report),
        "now_ms": int_value,
    },
    11: {"worker_id": worker_id_value, "moves": array(_move), "now_ms": int_value},
    12: {"nonce": str_value(NONCE_LEN_MAX)},
    13: {
        "partition": partition_id_value,
        "epoch": epoch_value,
        "checkpoint": optional(_final_checkpoint),
        "note": str_value(NOTE_LEN_MAX),
        "now_ms": int_value,
    },
    14: {
        "partition": partition_id_value,
        "epoch": epoch_value,
        "note": str_value(NOTE_LEN_MAX),
        "now_ms": int_value,
    },
    15: {"partition": partition_id_value, "note": str_value(NOTE_LEN_MAX), "now_ms": int_value},
    16: {
        "node_id": str_value(REQUEST_ID_LEN_MAX, empty_ok=False),
        "min_version": int_value,
        "max_version": int_value,
        "package_version": str_value(PACKAGE_VERSION_LEN_MAX),
        "now_ms": int_value,
    },
    17: {
        "version": int_value,
        "voters": array(str_value(REQUEST_ID_LEN_MAX, empty_ok=False), NODE_VERSIONS_MAX),
        "now_ms": int_value,
    },
    18: {
        "cluster_id": str_value(REQUEST_ID_LEN_MAX, empty_ok=False),
        "applied_index": int_value,
        "term": int_value,
        "sha256": str_value(SHA256_HEX_LEN, empty_ok=False),
        "size_bytes": int_value,
        "created_at_ms": int_value,
        "now_ms": int_value,
    },
    19: {
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "reason": str_value(NOTE_LEN_MAX),
        "until_ms": optional(int_value),
        "now_ms": int_value,
    },
    20: {
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "reason": str_value(NOTE_LEN_MAX),
        "since_ms": optional(int_value),
        "now_ms": int_value,
    },
    21: {"worker_ids": array(worker_id_value), "departed_by_ms": int_value, "now_ms": int_value},
    23: {"migration_id": migration_id_value, "now_ms": int_value},
    24: {"partitions": int_value, "by": str_value(MAINTENANCE_BY_LEN_MAX), "now_ms": int_value},
    25: {
        "partition": int_value,
        "epoch": int_value,
        "offset": int_value,
        "uri": str_value(URI_LEN_MAX),
        "now_ms": int_value,
    },
    26: {
        "generation": int_value,
        "checkpoints": array(_built_checkpoint, RESCALE_PARTITIONS_MAX),
        "now_ms": int_value,
    },
    27: {"generation": int_value, "now_ms": int_value},
    28: {
        "name": pipeline_name_value,
        # Characters, at most the bytes' bound: apply checks the UTF-8 bytes.
        "spec_text": str_value(SPEC_TEXT_BYTES_MAX, empty_ok=False),
        "spec_sha256": str_value(SHA256_HEX_LEN, empty_ok=False),
        "partitions": int_value,
        "pool": array(label_value, POOL_LABELS_MAX),
        "settings": settings_value,
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "now_ms": int_value,
    },
    29: {"name": pipeline_name_value, "incarnation": int_value, "now_ms": int_value},
    30: {"name": pipeline_name_value, "by": str_value(MAINTENANCE_BY_LEN_MAX), "now_ms": int_value},
    31: {"name": pipeline_name_value, "by": str_value(MAINTENANCE_BY_LEN_MAX), "now_ms": int_value},
    32: {
        "name": pipeline_name_value,
        "purge": bool_value,
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "now_ms": int_value,
    },
    33: {"name": pipeline_name_value, "incarnation": int_value, "now_ms": int_value},
    34: {
        "worker_id": worker_id_value,
        "incarnation": int_value,
        "labels": array(label_value, WORKER_LABELS_MAX),
        "slots": int_value,
        "now_ms": int_value,
    },
    35: {
        "name": pipeline_name_value,
        "token_id": _token_id,
        "role": enum_value(TokenRole),
        "sha256": str_value(SHA256_HEX_LEN, empty_ok=False),
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "now_ms": int_value,
    },
    36: {
        "name": pipeline_name_value,
        "token_id": _token_id,
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "now_ms": int_value,
    },
    38: {
        "name": pipeline_name_value,
        "incarnation": int_value,
        "partitions": int_value,
        # "" keeps the spec; characters, at most the bytes' bound: apply checks the bytes.
        "spec_text": str_value(SPEC_TEXT_BYTES_MAX),
        "spec_sha256": str_value(SHA256_HEX_LEN),
        "by": str_value(MAINTENANCE_BY_LEN_MAX),
        "now_ms": int_value,
    },
    39: {
        "name": pipeline_name_value,
        "incarnation": int_value,
        "partition": int_value,
        "epoch": int_value,
        "offset": int_value,
        "uri": str_value(URI_LEN_MAX),
        "now_ms": int_value,
    },
    40: {
        "name": pipeline_name_value,
        "incarnation": int_value,
        "generation": int_value,
        "checkpoints": array(_built_checkpoint, RESCALE_PARTITIONS_MAX),
        "now_ms": int_value,
    },
    41: {
        "name": pipeline_name_value,
        "incarnation": int_value,
        "generation": int_value,
        "now_ms": int_value,
    },
}
assert _COMMAND_SPECS.keys() == COMMAND_BY_TAG.keys()
_COMMAND_DECODERS: dict[int, Callable[[object, Where], Command]] = {
    tag: record(COMMAND_BY_TAG[tag], spec) for tag, spec in _COMMAND_SPECS.items()
}


def decode_command(data: bytes) -> tuple[str, Command]:
    """``(request_id, command)`` from an entry; CodecError on anything malformed."""
    envelope = unpack(data, ENTRY_BYTES_MAX)
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
        return request_id, decoder(body, "")  # again, naming the field at fault (Where)
