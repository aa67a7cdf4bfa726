"""The state a new cluster starts from when it is made from an old cluster's state (a backup,
or the log of a survivor of a lost majority): the same table, fenced from the old cluster.

Owns `fence_for_new_cluster`, run once by `ripple restore` and `ripple recover` on a decoded
state before it is seeded into the new cluster's data directories (never by `apply`: no
replica runs it). The rule (docs/design.md §10, docs/runbooks/restore.md): every partition keeps
its owner and checkpoints, and its epoch jumps by `epoch_jump`, far past any epoch the old
cluster can have handed out after the state was taken (an epoch grows by one per ownership
change, one log entry each). So a worker still holding an old epoch cannot checkpoint into
the new cluster, nor can two workers ever hold one (partition, epoch) across the two
clusters, and checkpoint keys (which name the epoch) of the two never meet. Every owned
partition is ASSIGNING at its new epoch, so the new leader hosts it again on its owner, from
its recorded checkpoint; a move not yet handed off is aborted (its source owns the
partition and is hosted again), one handed off stays and completes when its target hosts.
Invariants: the result satisfies `coordinator/core/invariants.state_violations`, epochs only
grow, the generation grows by one.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.core.cluster import ClusterState
from coordinator.core.model import (
    HISTORY_PER_PARTITION_MAX,
    INT_VALUE_MAX,
    NOTE_LEN_MAX,
    TERMINAL_MIGRATIONS_RETAINED_MAX,
    ChangeReason,
    Epoch,
    MigrationPhase,
    OwnershipChange,
    PartitionStatus,
)

__all__ = ["EPOCH_JUMP_DEFAULT", "fence_for_new_cluster"]

# Far more ownership changes than one partition sees between a backup and its restore (each
# takes a commit), and small enough that ten-digit checkpoint keys hold thousands of them.
EPOCH_JUMP_DEFAULT = 1_000_000


def fence_for_new_cluster(state: ClusterState, *, epoch_jump: int, now_ms: int, note: str) -> None:
    """Fence `state` (decoded for a new cluster; changed in place) from its old cluster."""
    if epoch_jump < 1:
        raise ValueError(f"epoch_jump must be >= 1, got {epoch_jump}")
    if any(p.epoch > INT_VALUE_MAX - epoch_jump for p in state.partitions):
        raise ValueError(f"epoch_jump {epoch_jump} takes an epoch past {INT_VALUE_MAX}")
    note = note[:NOTE_LEN_MAX]
    for m in state.in_flight_migrations():
        if m.phase in (MigrationPhase.PLANNED, MigrationPhase.WARMING, MigrationPhase.RELEASING):
            state.put_migration(
                replace(m, phase=MigrationPhase.ABORTED, note=note, updated_at_ms=now_ms)
            )
            part = state.partitions[m.partition]
            if part.migration == m.migration_id:
                state.put_partition(replace(part, migration=None))
    for part in list(state.partitions):
        epoch = Epoch(part.epoch + epoch_jump)
        change = OwnershipChange(
            epoch=epoch, owner=part.owner, reason=ChangeReason.RESTORE, at_ms=now_ms, note=note
        )
        status = PartitionStatus.UNASSIGNED if part.owner is None else PartitionStatus.ASSIGNING
        state.put_partition(
            replace(
                part,
                epoch=epoch,
                status=status,
                history=(*part.history, change)[-HISTORY_PER_PARTITION_MAX:],
            )
        )
    state.generation += 1
    state.evict_terminal(TERMINAL_MIGRATIONS_RETAINED_MAX)
