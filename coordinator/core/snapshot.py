"""The replicated state's snapshot format (msgpack): ``encode_state`` and ``decode_state``.

A snapshot is a map; records are arrays in declared field order. Keys added since the first
format trail it and are written only when used, so an older state keeps its bytes, and
decoding trusts nothing (``CodecError`` naming the field, as the command codec does).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from coordinator.core.cluster import ClusterState
from coordinator.core.codec import FORMAT_VERSION, result_from_plain, result_plain
from coordinator.core.commands import (
    Result,
)
from coordinator.core.model import (
    ADDRESS_LEN_MAX,
    CHECKPOINTS_KEPT_MAX,
    DEFAULT_PIPELINE,
    FIRST_COMMAND_SET_VERSION,
    HISTORY_PER_PARTITION_MAX,
    INT_VALUE_MAX,
    MAINTENANCE_BY_LEN_MAX,
    NODE_VERSIONS_MAX,
    NOTE_LEN_MAX,
    PACKAGE_VERSION_LEN_MAX,
    PIPELINES_MAX,
    REQUEST_ID_LEN_MAX,
    ROUTING_GENERATIONS_MAX,
    SHA256_HEX_LEN,
    SLOT_BASE,
    TOTAL_PARTITIONS_MAX,
    WORKER_LABELS_MAX,
    BackupRecord,
    ChangeReason,
    MaintenanceRecord,
    Migration,
    MigrationPhase,
    MigrationReason,
    NodeVersions,
    OwnershipChange,
    Partition,
    PartitionId,
    PartitionStatus,
    Rescale,
    RescalePhase,
    Worker,
    WorkerProfile,
    WorkerState,
)
from coordinator.core.partition_table import PartitionTable
from coordinator.core.pipeline_fields import (
    checkpoint_plain,
    checkpoint_row,
    decode_pipeline,
    label_row,
    pipeline_name_value,
    pipeline_plain,
)
from coordinator.core.wire_fields import (
    STATE_BYTES_MAX,
    CodecError,
    array,
    enum_value,
    epoch_value,
    int_value,
    list_value,
    migration_id_value,
    optional,
    pack,
    partition_id_value,
    str_value,
    tuple_value,
    unpack,
    wire_enum,
    worker_id_value,
)

__all__ = ["decode_state", "encode_state"]


# --- state (snapshots) -------------------------------------------------------------------------
# Records are arrays in declared field order, not maps: a snapshot of 100k partitions would
# otherwise spend most of its bytes repeating field names. Optional fields (a partition's
# earlier checkpoints and stuck reason, a history entry's note) are trailing elements written
# only when not empty: a state that does not use them encodes to the bytes of the format
# without them, and snapshots of that format decode.


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
        None if p.checkpoint is None else checkpoint_plain(p.checkpoint),
        history,
    ]
    if p.earlier or p.stuck:
        row += [[checkpoint_plain(c) for c in p.earlier], p.stuck]
    return row


def _worker_plain(w: Worker) -> list[object]:
    row: list[object] = [
        w.worker_id,
        w.address,
        w.incarnation,
        w.state.value,
        w.registered_at_ms,
        w.updated_at_ms,
    ]
    if w.profile is not None:  # trailing, so a worker without one keeps its bytes
        row += [[[x.key, x.value] for x in w.profile.labels], w.profile.slots]
    return row


def encode_state(state: ClusterState) -> bytes:
    return pack(
        {
            "format": FORMAT_VERSION,
            "total_partitions": state.total_partitions,
            "generation": state.generation,
            "migration_seq": state.migration_seq,
            "workers": [_worker_plain(w) for w in state.workers.values()],
            "partitions": [_partition_plain(p) for p in state.partitions.of(DEFAULT_PIPELINE)],
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
            "requests": [[rid, result_plain(r)] for rid, r in state.requests.items()],
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
    if state.retired_total:
        out["retired"] = [state.incarnation_floor, state.retired_total]
    mm = state.maintenance
    if mm is not None:
        out["maintenance"] = [mm.by, mm.reason, mm.since_ms, mm.until_ms]
    if state.routing != _default_routing(state.total_partitions):
        out["routing"] = list(state.routing)
    r = state.rescale
    if r is not None:
        out["rescale"] = [
            r.generation,
            r.partitions,
            r.previous,
            wire_enum(r.phase),
            [None if c is None else checkpoint_plain(c) for c in r.cuts],
            r.base_epoch,
            r.by,
            r.started_at_ms,
            r.updated_at_ms,
        ]
    if state.pipeline_seq:
        out["pipelines"] = [
            state.pipeline_seq,
            [pipeline_plain(p) for p in state.pipelines.values()],
            state.slot_seq,
            # The recorded pipelines' partitions: each row is its number, its pipeline and
            # then a partition's array, as `default`'s are under "partitions".
            [
                [p.partition, p.pipeline, *_partition_plain(p)]
                for p in state.partitions
                if p.pipeline != DEFAULT_PIPELINE
            ],
        ]
    return out


def _default_routing(total_partitions: int) -> tuple[int, ...]:
    """The routing of a cluster that never rescaled: what a snapshot without one holds."""
    return (total_partitions,) if total_partitions else ()


_worker_state = enum_value(WorkerState)
_partition_status = enum_value(PartitionStatus)
_phase = enum_value(MigrationPhase)
_migration_reason = enum_value(MigrationReason)
_change_reason = enum_value(ChangeReason)
_opt_worker_id = optional(worker_id_value)
_opt_migration_id = optional(migration_id_value)


def _decode_partition(index: int, value: object) -> Partition:
    where = f"partitions[{index}]"
    row = tuple_value(value, 6, where, optional=2)
    owner, epoch, status, migration, checkpoint, history = row[:6]
    earlier_raw, stuck = row[6:] if len(row) == 8 else ([], "")
    cp = None if checkpoint is None else checkpoint_row(checkpoint, f"{where}.checkpoint")
    earlier = array(checkpoint_row, CHECKPOINTS_KEPT_MAX)(earlier_raw, f"{where}.earlier")
    changes: list[OwnershipChange] = []
    for h in array(lambda v, w: v, HISTORY_PER_PARTITION_MAX)(history, f"{where}.history"):
        entry = tuple_value(h, 4, f"{where}.history", optional=1)
        h_epoch, h_owner, h_reason, h_at = entry[:4]
        changes.append(
            OwnershipChange(
                epoch=epoch_value(h_epoch, where),
                owner=_opt_worker_id(h_owner, where),
                reason=_change_reason(h_reason, where),
                at_ms=int_value(h_at, where),
                note=str_value(NOTE_LEN_MAX)(entry[4], where) if len(entry) == 5 else "",
            )
        )
    return Partition(
        partition=PartitionId(index),
        owner=_opt_worker_id(owner, where),
        epoch=epoch_value(epoch, where),
        status=_partition_status(status, where),
        migration=_opt_migration_id(migration, where),
        checkpoint=cp,
        history=tuple(changes),
        earlier=earlier,
        stuck=str_value(NOTE_LEN_MAX)(stuck, f"{where}.stuck"),
    )


def _decode_worker(value: object) -> Worker:
    row = tuple_value(value, 6, "workers", optional=2)
    wid, address, incarnation, state, registered, updated = row[:6]
    profile = None
    if len(row) == 8:
        labels, slots = row[6:]
        profile = WorkerProfile(
            labels=array(label_row, WORKER_LABELS_MAX)(labels, "workers.labels"),
            slots=int_value(slots, "workers.slots"),
        )
    return Worker(
        profile=profile,
        worker_id=worker_id_value(wid, "workers"),
        address=str_value(ADDRESS_LEN_MAX)(address, "workers"),
        incarnation=int_value(incarnation, "workers"),
        state=_worker_state(state, "workers"),
        registered_at_ms=int_value(registered, "workers"),
        updated_at_ms=int_value(updated, "workers"),
    )


def _decode_migration(value: object) -> Migration:
    mid, partition, source, target, phase, reason, created, updated, note = tuple_value(
        value, 9, "migrations"
    )
    return Migration(
        migration_id=migration_id_value(mid, "migrations"),
        partition=partition_id_value(partition, "migrations"),
        source=worker_id_value(source, "migrations"),
        target=worker_id_value(target, "migrations"),
        phase=_phase(phase, "migrations"),
        reason=_migration_reason(reason, "migrations"),
        created_at_ms=int_value(created, "migrations"),
        updated_at_ms=int_value(updated, "migrations"),
        note=str_value(NOTE_LEN_MAX)(note, "migrations"),
    )


def decode_state(data: bytes) -> ClusterState:
    obj = unpack(data, STATE_BYTES_MAX)
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
    state.total_partitions = int_value(obj["total_partitions"], "total_partitions")
    state.generation = int_value(obj["generation"], "generation")
    state.migration_seq = int_value(obj["migration_seq"], "migration_seq")
    for value in list_value(obj["workers"], "workers"):
        w = _decode_worker(value)
        state.workers[w.worker_id] = w
    state.partitions = PartitionTable(
        _decode_partition(i, v) for i, v in enumerate(list_value(obj["partitions"], "partitions"))
    )
    if len(state.partitions) != state.total_partitions:
        raise CodecError("partition count does not match total_partitions", "partitions")
    for value in list_value(obj["migrations"], "migrations"):
        m = _decode_migration(value)
        state.migrations[m.migration_id] = m
    requests: OrderedDict[str, Result] = OrderedDict()
    for value in list_value(obj["requests"], "requests"):
        rid, result = tuple_value(value, 2, "requests")
        requests[str_value(REQUEST_ID_LEN_MAX)(rid, "requests")] = result_from_plain(result)
    state.requests = requests
    if "command_set" in obj:
        _decode_command_set(state, obj["command_set"])
    if "last_backup" in obj:
        state.last_backup = _decode_backup(obj["last_backup"])
    if "retired" in obj:
        floor, total = tuple_value(obj["retired"], 2, "retired")
        state.incarnation_floor = int_value(floor, "retired")
        state.retired_total = int_value(total, "retired")
    if "maintenance" in obj:
        state.maintenance = _decode_maintenance(obj["maintenance"])
    state.routing = _default_routing(state.total_partitions)
    if "routing" in obj:
        state.routing = _decode_routing(obj["routing"])
    if state.routing and state.routing[-1] != state.total_partitions:
        raise CodecError("routing's last count must be total_partitions", "routing")
    if "rescale" in obj:
        state.rescale = _decode_rescale(obj["rescale"])
    if "pipelines" in obj:
        _decode_pipelines(state, obj["pipelines"])
    state.reindex()
    return state


_BOOKKEEPING_KEYS = (
    "command_set",
    "last_backup",
    "retired",
    "maintenance",
    "routing",
    "rescale",
    "pipelines",
)


def _in_order(present: list[object], allowed: tuple[str, ...]) -> bool:
    """`present` is some of `allowed`, each at most once, in `allowed`'s order."""
    positions = [allowed.index(k) for k in present if isinstance(k, str) and k in allowed]
    return len(positions) == len(present) and positions == sorted(set(positions))


def _decode_command_set(state: ClusterState, value: object) -> None:
    finalized, records = tuple_value(value, 2, "command_set")
    state.finalized_version = int_value(finalized, "command_set")
    for row in array(lambda v, w: v, NODE_VERSIONS_MAX)(records, "command_set"):
        node_id, low, high, package, at_ms = tuple_value(row, 5, "command_set")
        record = NodeVersions(
            node_id=worker_id_value(node_id, "command_set"),
            min_version=int_value(low, "command_set"),
            max_version=int_value(high, "command_set"),
            package_version=str_value(PACKAGE_VERSION_LEN_MAX)(package, "command_set"),
            reported_at_ms=int_value(at_ms, "command_set"),
        )
        state.node_versions[record.node_id] = record


def _decode_backup(value: object) -> BackupRecord:
    cluster_id, index, term, sha, size, created, recorded = tuple_value(value, 7, "last_backup")
    return BackupRecord(
        cluster_id=str_value(REQUEST_ID_LEN_MAX, empty_ok=False)(cluster_id, "last_backup"),
        applied_index=int_value(index, "last_backup"),
        term=int_value(term, "last_backup"),
        sha256=str_value(SHA256_HEX_LEN, empty_ok=False)(sha, "last_backup"),
        size_bytes=int_value(size, "last_backup"),
        created_at_ms=int_value(created, "last_backup"),
        recorded_at_ms=int_value(recorded, "last_backup"),
    )


def _decode_maintenance(value: object) -> MaintenanceRecord:
    by, reason, since, until = tuple_value(value, 4, "maintenance")
    return MaintenanceRecord(
        by=str_value(MAINTENANCE_BY_LEN_MAX, empty_ok=False)(by, "maintenance"),
        reason=str_value(NOTE_LEN_MAX, empty_ok=False)(reason, "maintenance"),
        since_ms=int_value(since, "maintenance"),
        until_ms=optional(int_value)(until, "maintenance"),
    )


def _decode_routing(value: object) -> tuple[int, ...]:
    counts = array(int_value, ROUTING_GENERATIONS_MAX)(value, "routing")
    if not counts or any(not 1 <= c <= TOTAL_PARTITIONS_MAX for c in counts):
        raise CodecError(
            f"routing must be 1..{ROUTING_GENERATIONS_MAX} counts, each >= 1", "routing"
        )
    return tuple(counts)


_rescale_phase = enum_value(RescalePhase)
_cut = optional(checkpoint_row)


def _decode_rescale(value: object) -> Rescale:
    where = "rescale"
    generation, partitions, previous, phase, cuts, base, by, started, updated = tuple_value(
        value, 9, where
    )
    return Rescale(
        generation=int_value(generation, where),
        partitions=int_value(partitions, where),
        previous=int_value(previous, where),
        phase=_rescale_phase(phase, where),
        cuts=array(_cut, TOTAL_PARTITIONS_MAX)(cuts, f"{where}.cuts"),
        base_epoch=optional(epoch_value)(base, where),
        by=str_value(MAINTENANCE_BY_LEN_MAX)(by, where),
        started_at_ms=int_value(started, where),
        updated_at_ms=int_value(updated, where),
    )


def _decode_pipelines(state: ClusterState, value: object) -> None:
    """The pipeline records, their incarnation counter, the partition number counter and
    the recorded pipelines' partitions (absent: no pipeline was ever created)."""
    seq, rows, slot_seq, partition_rows = tuple_value(value, 4, "pipelines")
    state.pipeline_seq = int_value(seq, "pipelines")
    for i, row in enumerate(list_value(rows, "pipelines")):
        if i >= PIPELINES_MAX:
            raise CodecError(f"pipelines has more than {PIPELINES_MAX} records", "pipelines")
        p = decode_pipeline(row, f"pipelines[{i}]")
        if p.name in state.pipelines:
            raise CodecError(f"pipeline {p.name} appears twice", "pipelines")
        state.pipelines[p.name] = p
    state.slot_seq = int_value(slot_seq, "pipelines")
    if not SLOT_BASE <= state.slot_seq <= INT_VALUE_MAX + 1:
        raise CodecError("the partition number counter is out of range", "pipelines")
    parts = []
    for i, row in enumerate(list_value(partition_rows, "pipelines")):
        if i >= TOTAL_PARTITIONS_MAX:
            raise CodecError(f"more than {TOTAL_PARTITIONS_MAX} partitions", "pipelines")
        where = f"pipelines.partitions[{i}]"
        number, name, *rest = tuple_value(row, 8, where, optional=2)
        slot = int_value(number, where)
        pipeline = pipeline_name_value(name, where)
        if not SLOT_BASE <= slot < state.slot_seq or pipeline not in state.pipelines:
            raise CodecError(f"partition {slot} of {pipeline} is not one the state made", where)
        parts.append(replace(_decode_partition(slot, rest), pipeline=pipeline))
    try:
        state.partitions.add(sorted(parts, key=lambda x: x.partition))
    except ValueError as e:
        raise CodecError(str(e), "pipelines") from None
