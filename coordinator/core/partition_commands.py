"""`apply`'s handlers of the commands about partitions: Bootstrap (the table), AssignPartitions,
PartitionOnline, RecordCheckpoints, FallBack, MarkStuck and ResetPartition. Each validates
completely, asks the lifecycle tables, then changes the state (coordinator/core/state.py's
contract).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from coordinator.core import edits, lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    AssignPartitions,
    AssignResult,
    Bootstrap,
    BootstrapResult,
    CheckpointsResult,
    CheckpointVerdict,
    FallBack,
    FallBackResult,
    MarkStuck,
    Ok,
    OnlineResult,
    PartitionOnline,
    RecordCheckpoints,
    Rejected,
    ResetPartition,
    ResetResult,
    StuckResult,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    BATCH_ITEMS_MAX,
    TOTAL_PARTITIONS_MAX,
    ChangeReason,
    Checkpoint,
    Migration,
    MigrationPhase,
    PartitionId,
    PartitionStatus,
    WorkerState,
    unassigned_partition,
)
from coordinator.core.partition_table import PartitionTable

__all__ = [
    "assign_partitions",
    "bootstrap",
    "fall_back",
    "mark_stuck",
    "partition_online",
    "record_checkpoints",
    "reset_partition",
]


def bootstrap(state: ClusterState, cmd: Bootstrap) -> Outcome:
    total = cmd.total_partitions
    if not 1 <= total <= TOTAL_PARTITIONS_MAX:
        return rejected(
            "invalid", f"total_partitions must be 1..{TOTAL_PARTITIONS_MAX}", "total_partitions"
        ), False
    if state.total_partitions == total:
        return Ok(value=BootstrapResult(total_partitions=total, created=False)), False
    if state.total_partitions != 0:
        return rejected(
            "conflict",
            f"already bootstrapped with {state.total_partitions} partitions",
            "total_partitions",
        ), False
    problem = lifecycle.check(
        lifecycle.PARTITION_EDGES,
        None,
        PartitionStatus.UNASSIGNED,
        "Bootstrap",
        "partition 0",
        "total_partitions",
    )
    if problem is not None:
        return problem, False
    state.total_partitions = total
    state.routing = (total,)
    state.partitions = PartitionTable(unassigned_partition(p) for p in range(total))
    # Creating unowned partitions at epoch 0 changes no (owner, epoch): generation stays.
    return Ok(value=BootstrapResult(total_partitions=total, created=True)), False


def assign_partitions(state: ClusterState, cmd: AssignPartitions) -> Outcome:
    bad = edits.check_assignments(state, cmd.assignments, set())
    if bad is not None:
        return bad, False
    for i, a in enumerate(cmd.assignments):
        if a.owner is None:
            return rejected("invalid", f"assignments[{i}]: owner is required", "owner"), False
    # Only an UNASSIGNED partition is assigned (its table says so).
    problem = edits.lifecycle_problem(
        state,
        "AssignPartitions",
        partitions=[([a.partition for a in cmd.assignments], PartitionStatus.ASSIGNING)],
    )
    if problem is not None:
        return problem, False
    for a in cmd.assignments:
        edits.reassign(
            state,
            a.partition,
            owner=a.owner,
            reason=ChangeReason.ASSIGNED,
            now_ms=cmd.now_ms,
            migration=None,
        )
    return Ok(value=AssignResult(assigned=len(cmd.assignments))), bool(cmd.assignments)


def partition_online(state: ClusterState, cmd: PartitionOnline) -> Outcome:
    p = cmd.partition
    if not edits.in_range(state, p):
        return rejected("invalid", f"partition {p} out of range", "partition"), False
    part = state.partitions[p]
    if cmd.epoch < part.epoch:
        return rejected(
            "stale_epoch", f"epoch {cmd.epoch} is older than {part.epoch}", "epoch"
        ), False
    if cmd.epoch > part.epoch:
        return rejected("conflict", f"epoch {cmd.epoch} is not issued yet", "epoch"), False
    if cmd.owner != part.owner:
        return rejected("conflict", f"partition {p} is owned by {part.owner}", "owner"), False
    value = OnlineResult(
        partition=p, epoch=part.epoch, changed=False, migration_done=None, left=None
    )
    if part.status is PartitionStatus.ONLINE:
        return Ok(value=value), False
    mid = part.migration
    done: Migration | None = None
    if mid is not None and state.migrations[mid].phase is MigrationPhase.HANDED_OFF:
        # The DONE commit point: the target hosts the partition at the hand-off epoch (or a
        # later restart epoch). There is no separate "done" command.
        done = state.migrations[mid]
        mid = None
    finished = () if done is None else (done.migration_id,)
    leaving = edits.leavers(state, () if done is None else (done.source,), ending=finished)
    problem = edits.lifecycle_problem(
        state,
        "PartitionOnline",
        workers=((w, WorkerState.LEFT) for w in leaving),
        partitions=[([p], PartitionStatus.ONLINE)],
        migrations=((f, MigrationPhase.DONE) for f in finished),
    )
    if problem is not None:
        return problem, False
    state.put_partition(replace(part, status=PartitionStatus.ONLINE, migration=mid, stuck=""))
    value = replace(value, changed=True)
    if done is not None:
        state.put_migration(replace(done, phase=MigrationPhase.DONE, updated_at_ms=cmd.now_ms))
        value = replace(value, migration_done=done.migration_id)
        if edits.leave(state, leaving, cmd.now_ms):
            value = replace(value, left=done.source)
    return Ok(value=value), False


def record_checkpoints(state: ClusterState, cmd: RecordCheckpoints) -> Outcome:
    w = edits.current_worker(state, cmd.worker_id, cmd.incarnation)
    if isinstance(w, Rejected):
        return w, False
    if len(cmd.entries) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} entries", "entries"), False
    results: list[CheckpointVerdict] = []
    for e in cmd.entries:
        reason: str | None = None
        if not edits.in_range(state, e.partition):
            reason = "partition out of range"
        else:
            part = state.partitions[e.partition]
            if part.owner != cmd.worker_id:
                reason = "not the owner"
            elif e.epoch != part.epoch:
                reason = f"epoch {e.epoch} is not the current epoch {part.epoch}"
            elif part.checkpoint is not None and e.offset < part.checkpoint.offset:
                reason = f"offset {e.offset} is behind {part.checkpoint.offset}"
            else:
                checkpoint = Checkpoint(
                    offset=e.offset, uri=e.uri, epoch=part.epoch, at_ms=cmd.now_ms
                )
                state.put_partition(
                    edits.accept_checkpoint(part, checkpoint, rescaled=edits.rescaled(state, part))
                )
        status: Literal["accepted", "fenced"] = "fenced" if reason is not None else "accepted"
        results.append(CheckpointVerdict(partition=e.partition, status=status, reason=reason))
    return Ok(value=CheckpointsResult(results=tuple(results))), False


def fall_back(state: ClusterState, cmd: FallBack) -> Outcome:
    part = edits.assigning_at(state, cmd.partition, cmd.epoch, cmd.note)
    if isinstance(part, Rejected):
        return part, False
    if part.checkpoint is None:
        return rejected("conflict", f"partition {part.partition} has no checkpoint"), False
    to = cmd.checkpoint
    if to is None and edits.rescaled(state, part):
        return _no_full_replay(part.partition, "fall back to a full replay"), False
    checkpoint: Checkpoint | None = None
    earlier: tuple[Checkpoint, ...] = ()
    if to is not None:
        index = next(
            (
                i
                for i, c in enumerate(part.earlier)
                if (c.offset, c.uri, c.epoch) == (to.offset, to.uri, to.epoch)
            ),
            None,
        )
        if index is None:
            return rejected(
                "invalid", "checkpoint is not one of the partition's earlier ones", "checkpoint"
            ), False
        checkpoint, earlier = part.earlier[index], part.earlier[index + 1 :]
    problem = edits.lifecycle_problem(
        state, "FallBack", partitions=[([part.partition], PartitionStatus.ASSIGNING)]
    )
    if problem is not None:
        return problem, False
    state.put_partition(replace(part, checkpoint=checkpoint, earlier=earlier, stuck=""))
    edits.reassign(
        state,
        part.partition,
        owner=part.owner,
        reason=ChangeReason.FALLBACK,
        now_ms=cmd.now_ms,
        migration=part.migration,
        note=cmd.note,
    )
    new = state.partitions[part.partition]
    value = FallBackResult(
        partition=part.partition,
        epoch=new.epoch,
        offset=None if checkpoint is None else checkpoint.offset,
        earlier_left=len(earlier),
    )
    return Ok(value=value), True


def mark_stuck(state: ClusterState, cmd: MarkStuck) -> Outcome:
    part = edits.assigning_at(state, cmd.partition, cmd.epoch, cmd.note)
    if isinstance(part, Rejected):
        return part, False
    state.put_partition(replace(part, stuck=cmd.note))
    return Ok(value=StuckResult(partition=part.partition, stuck=cmd.note)), False


def reset_partition(state: ClusterState, cmd: ResetPartition) -> Outcome:
    p = cmd.partition
    if not edits.in_range(state, p):
        return rejected("invalid", f"partition {p} out of range", "partition"), False
    bad = edits.note_or_reject(cmd.note)
    if bad is not None:
        return bad, False
    part = state.partitions[p]
    if part.status is not PartitionStatus.ASSIGNING or part.owner is None:
        # An ONLINE partition's owner holds its state: resetting it would only lose that.
        return rejected(
            "conflict", f"partition {p} is {part.status.value}; only an assigning one resets"
        ), False
    if edits.rescaled(state, part):
        return _no_full_replay(p, "reset"), False
    problem = edits.lifecycle_problem(
        state, "ResetPartition", partitions=[([p], PartitionStatus.ASSIGNING)]
    )
    if problem is not None:
        return problem, False
    state.put_partition(replace(part, checkpoint=None, earlier=(), stuck=""))
    edits.reassign(
        state,
        p,
        owner=part.owner,
        reason=ChangeReason.RESET,
        now_ms=cmd.now_ms,
        migration=part.migration,
        note=cmd.note,
    )
    return Ok(value=ResetResult(partition=p, epoch=state.partitions[p].epoch)), True


def _no_full_replay(p: PartitionId, what: str) -> Rejected:
    """A rescale's partition starts from the state its build moved there: replaying its own
    log from the start would lose every key it inherited, so nothing replays it from zero."""
    return rejected(
        "rescaled",
        f"partition {p} belongs to a rescaled table and cannot {what}: its state starts at "
        "its rescale's build, not at offset 0",
    )
