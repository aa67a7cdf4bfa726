"""The wire form of a pipeline's fields: in commands (coordinator/core/codec.py, maps in
declared field order) and as a snapshot's record (coordinator/core/snapshot.py, an array).

Owns the decoders of a pipeline's name, pool labels, settings and whole record (its tokens,
earlier generations and newest rescale trail it, written only when used, so a record without
them keeps the form it had before they existed), and of a checkpoint as a snapshot holds it.
Like every decoder of the core they trust nothing: malformed input is a `CodecError` naming
the field.
The bounds a handler enforces (settings' ranges, a spec's hash) are apply's; these check
only shape, types and sizes, so a snapshot decodes whatever apply could have recorded.
"""

from __future__ import annotations

from coordinator.core.model import (
    MAINTENANCE_BY_LEN_MAX,
    PIPELINE_PARTITIONS_MAX,
    PIPELINE_TOKENS_MAX,
    POOL_LABELS_MAX,
    ROUTING_GENERATIONS_MAX,
    SHA256_HEX_LEN,
    SPEC_TEXT_BYTES_MAX,
    URI_LEN_MAX,
    Checkpoint,
    Label,
    Pipeline,
    PipelineName,
    PipelineRescale,
    PipelineSettings,
    PipelineState,
    PipelineToken,
    RescalePhase,
    SlotRange,
    TokenRole,
)
from coordinator.core.wire_fields import (
    CodecError,
    Where,
    array,
    bool_value,
    enum_value,
    epoch_value,
    int_value,
    optional,
    record,
    str_value,
    tuple_value,
    wire_enum,
    worker_id_value,
)

__all__ = [
    "checkpoint_plain",
    "checkpoint_row",
    "decode_pipeline",
    "label_row",
    "label_value",
    "pipeline_name_value",
    "pipeline_plain",
    "settings_value",
    "token_row",
]


def _id_value(value: object, where: Where) -> str:
    # Every id of the core has one pattern (`valid_id`), which the worker id's decoder checks.
    return str(worker_id_value(value, where))


def pipeline_name_value(value: object, where: Where) -> PipelineName:
    return PipelineName(_id_value(value, where))


label_value = record(Label, {"key": _id_value, "value": _id_value})
settings_value = record(
    PipelineSettings,
    {
        "batch_interval_ms": int_value,
        "checkpoint_interval_ms": int_value,
        "max_keys_per_partition": int_value,
        "retention_ms": int_value,
    },
)


def pipeline_plain(p: Pipeline) -> list[object]:
    """A record as a snapshot's array, fields in declared order."""
    s = p.settings
    return [
        p.name,
        p.incarnation,
        p.spec_text,
        p.spec_sha256,
        p.spec_version,
        p.partitions,
        p.routing_generation,
        [[label.key, label.value] for label in p.pool],
        [s.batch_interval_ms, s.checkpoint_interval_ms, s.max_keys_per_partition, s.retention_ms],
        p.state.value,
        p.purge,
        p.created_at_ms,
        p.updated_at_ms,
        p.by,
        p.first_slot,
        *_trailing(p),
    ]


def _trailing(p: Pipeline) -> list[object]:
    tokens = [_token_plain(t) for t in p.tokens]
    if p.rescale is None and not p.past:
        return [tokens] if tokens else []
    past = [[x.first_slot, x.partitions, x.routing_generation] for x in p.past]
    return [tokens, past, None if p.rescale is None else _rescale_plain(p.rescale)]


def _rescale_plain(r: PipelineRescale) -> list[object]:
    return [
        r.generation,
        r.partitions,
        r.previous,
        r.first_slot,
        r.spec_text,
        r.spec_sha256,
        r.spec_version,
        wire_enum(r.phase),
        [None if c is None else checkpoint_plain(c) for c in r.cuts],
        r.base_epoch,
        r.by,
        r.started_at_ms,
        r.updated_at_ms,
    ]


def checkpoint_plain(c: Checkpoint) -> list[object]:
    return [c.offset, c.uri, c.epoch, c.at_ms]


def checkpoint_row(value: object, where: Where) -> Checkpoint:
    offset, uri, epoch, at_ms = tuple_value(value, 4, where)
    return Checkpoint(
        offset=int_value(offset, where),
        uri=str_value(URI_LEN_MAX)(uri, where),
        epoch=epoch_value(epoch, where),
        at_ms=int_value(at_ms, where),
    )


def _slot_range_row(value: object, where: Where) -> SlotRange:
    first, partitions, generation = tuple_value(value, 3, where)
    return SlotRange(
        first_slot=int_value(first, where),
        partitions=int_value(partitions, where),
        routing_generation=int_value(generation, where),
    )


_phase = enum_value(RescalePhase)
_cut = optional(checkpoint_row)


def _rescale_row(value: object, where: Where) -> PipelineRescale:
    row = tuple_value(value, 13, where)
    generation, partitions, previous, first, text, sha, version, phase = row[:8]
    cuts, base, by, started, updated = row[8:]
    return PipelineRescale(
        generation=int_value(generation, where),
        partitions=int_value(partitions, where),
        previous=int_value(previous, where),
        first_slot=int_value(first, where),
        spec_text=str_value(SPEC_TEXT_BYTES_MAX)(text, where),
        spec_sha256=str_value(SHA256_HEX_LEN, empty_ok=False)(sha, where),
        spec_version=int_value(version, where),
        phase=_phase(phase, where),
        cuts=array(_cut, PIPELINE_PARTITIONS_MAX)(cuts, f"{where}.cuts"),
        base_epoch=optional(epoch_value)(base, where),
        by=str_value(MAINTENANCE_BY_LEN_MAX)(by, where),
        started_at_ms=int_value(started, where),
        updated_at_ms=int_value(updated, where),
    )


def _token_plain(t: PipelineToken) -> list[object]:
    return [t.token_id, t.role.value, t.sha256, t.created_at_ms, t.by]


def token_row(value: object, where: Where) -> PipelineToken:
    token_id, role, sha256, created, by = tuple_value(value, 5, where)
    return PipelineToken(
        token_id=_id_value(token_id, where),
        role=_role(role, where),
        sha256=str_value(SHA256_HEX_LEN, empty_ok=False)(sha256, where),
        created_at_ms=int_value(created, where),
        by=str_value(MAINTENANCE_BY_LEN_MAX)(by, where),
    )


_state = enum_value(PipelineState)
_role = enum_value(TokenRole)


def label_row(value: object, where: Where) -> Label:
    key, val = tuple_value(value, 2, where)
    return Label(key=_id_value(key, where), value=_id_value(val, where))


def decode_pipeline(value: object, where: str) -> Pipeline:
    # A record with no token is written without the field, so records made before tokens
    # existed and those with none have one form; likewise its generations and rescale.
    if not isinstance(value, list) or len(value) not in (15, 16, 18):
        raise CodecError(f"{where} must be an array of 15, 16 or 18", where)
    fields = value
    tokens: tuple[PipelineToken, ...] = ()
    if len(fields) >= 16:
        tokens = array(token_row, PIPELINE_TOKENS_MAX)(fields[15], f"{where}.tokens")
    past: tuple[SlotRange, ...] = ()
    rescale = None
    if len(fields) == 18:
        past = array(_slot_range_row, ROUTING_GENERATIONS_MAX)(fields[16], f"{where}.past")
        rescale = optional(_rescale_row)(fields[17], f"{where}.rescale")
    (
        name,
        incarnation,
        spec_text,
        spec_sha256,
        spec_version,
        partitions,
        routing_generation,
        pool,
        settings,
        state,
        purge,
        created,
        updated,
        by,
        first_slot,
    ) = fields[:15]
    batch, checkpoint, keys, retention = tuple_value(settings, 4, f"{where}.settings")
    return Pipeline(
        name=pipeline_name_value(name, where),
        incarnation=int_value(incarnation, where),
        spec_text=str_value(SPEC_TEXT_BYTES_MAX, empty_ok=False)(spec_text, where),
        spec_sha256=str_value(SHA256_HEX_LEN, empty_ok=False)(spec_sha256, where),
        spec_version=int_value(spec_version, where),
        partitions=int_value(partitions, where),
        routing_generation=int_value(routing_generation, where),
        pool=array(label_row, POOL_LABELS_MAX)(pool, f"{where}.pool"),
        settings=PipelineSettings(
            batch_interval_ms=int_value(batch, where),
            checkpoint_interval_ms=int_value(checkpoint, where),
            max_keys_per_partition=int_value(keys, where),
            retention_ms=int_value(retention, where),
        ),
        state=_state(state, where),
        purge=bool_value(purge, where),
        created_at_ms=int_value(created, where),
        updated_at_ms=int_value(updated, where),
        by=str_value(MAINTENANCE_BY_LEN_MAX)(by, where),
        first_slot=int_value(first_slot, where),
        tokens=tokens,
        rescale=rescale,
        past=past,
    )
