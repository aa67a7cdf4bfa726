"""The building blocks `apply`'s handlers share: the changes every handler makes through the
container's writers (a new epoch, an accepted checkpoint, a finished migration, a leave), the
lifecycle check each handler asks before its first mutation, and the validation several
commands share (moves, assignments, a partition in range). Nothing here is dispatched; the
handlers (`worker_commands.py`, `partition_commands.py`, `migration_commands.py`) and the
service's dry runs (`check_moves`) call it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from coordinator.core import lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    Assignment,
    Move,
    NewMigration,
    Rejected,
    Result,
    rejected,
)
from coordinator.core.model import (
    BATCH_ITEMS_MAX,
    CHECKPOINTS_KEPT_MAX,
    DEFAULT_PIPELINE,
    HISTORY_PER_PARTITION_MAX,
    NOTE_LEN_MAX,
    OWNING_WORKER_STATES,
    ChangeReason,
    Checkpoint,
    Epoch,
    Migration,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    OwnershipChange,
    Partition,
    PartitionId,
    PartitionStatus,
    Worker,
    WorkerId,
    WorkerState,
)

__all__ = [
    "Outcome",
    "accept_checkpoint",
    "assigning_at",
    "check_assignments",
    "check_moves",
    "create_migrations",
    "current_worker",
    "finish_migration",
    "in_range",
    "leave",
    "leavers",
    "lifecycle_problem",
    "migration_or_reject",
    "note_or_reject",
    "reassign",
    "rescaled",
    "supersedable",
    "superseded",
]

Outcome = tuple[Result, bool]  # (result, whether some partition's (owner, epoch) changed)


def reassign(
    state: ClusterState,
    partition: PartitionId,
    *,
    owner: WorkerId | None,
    reason: ChangeReason,
    now_ms: int,
    migration: MigrationId | None,
    note: str = "",
) -> None:
    """Give the partition a new epoch (and maybe owner): every such change fences the past."""
    old = state.partitions[partition]
    epoch = Epoch(old.epoch + 1)  # the one place a partition's epoch grows
    change = OwnershipChange(epoch=epoch, owner=owner, reason=reason, at_ms=now_ms, note=note)
    history = (*old.history, change)[-HISTORY_PER_PARTITION_MAX:]
    status = PartitionStatus.UNASSIGNED if owner is None else PartitionStatus.ASSIGNING
    state.put_partition(
        replace(old, owner=owner, epoch=epoch, status=status, migration=migration, history=history),
    )


def accept_checkpoint(part: Partition, new: Checkpoint, *, rescaled: bool) -> Partition:
    """``part`` with ``new`` as its checkpoint; the one it replaces joins the fallback chain
    unless ``new`` is at the same offset (the same state: keeping both gains nothing).

    `rescaled`: the table is a rescale's, so the chain's oldest checkpoint is the build
    StatesBuilt started the partition from, its floor: no replay from offset 0 rebuilds that
    state, so the floor stays at the chain's end for the table's life, also behind a
    checkpoint at its own offset (the only equal pair a chain holds), and a full chain drops
    its oldest other checkpoint instead."""
    old = part.checkpoint
    if old is None or old.uri == new.uri:
        return replace(part, checkpoint=new)
    if old.offset >= new.offset:
        if rescaled and not part.earlier and old.offset == new.offset:
            return replace(part, checkpoint=new, earlier=(old,))
        return replace(part, checkpoint=new)
    earlier = (old, *part.earlier)
    if rescaled and len(earlier) > 1:
        if old.offset == earlier[-1].offset:
            earlier = earlier[1:]  # the floor holds the same state
        if len(earlier) > CHECKPOINTS_KEPT_MAX:
            earlier = (*earlier[: CHECKPOINTS_KEPT_MAX - 1], earlier[-1])
    return replace(part, checkpoint=new, earlier=earlier[:CHECKPOINTS_KEPT_MAX])


def rescaled(state: ClusterState, part: Partition) -> bool:
    """Whether `part` is of a rescale's table (it starts at its build): `default`'s, after
    a rescale; a recorded pipeline's, from its first rescale's new generation on."""
    if part.pipeline == DEFAULT_PIPELINE:
        return state.routing_generation > 0
    p = state.pipelines.get(part.pipeline)
    return p is not None and p.routing_generation > 0


def finish_migration(
    state: ClusterState, m: Migration, phase: MigrationPhase, note: str, now_ms: int
) -> None:
    """Make ``m`` terminal and detach it from its partition."""
    state.put_migration(replace(m, phase=phase, note=note, updated_at_ms=now_ms))
    part = state.partitions[m.partition]
    if part.migration == m.migration_id:
        state.put_partition(replace(part, migration=None))


def leave(state: ClusterState, workers: Iterable[WorkerId], now_ms: int) -> bool:
    """Make `workers` (what `leavers` decided) LEFT; True when there was one."""
    left = False
    for wid in workers:
        state.put_worker(replace(state.workers[wid], state=WorkerState.LEFT, updated_at_ms=now_ms))
        left = True
    return left


def lifecycle_problem(
    state: ClusterState,
    command: str,
    *,
    workers: Iterable[tuple[WorkerId, WorkerState]] = (),
    partitions: Iterable[tuple[Collection[int], PartitionStatus]] = (),
    migrations: Iterable[tuple[MigrationId | None, MigrationPhase]] = (),
) -> Rejected | None:
    """The rejection for the first change that is not an edge of coordinator/core/lifecycle.py,
    or None. A handler asks it before its first mutation, with every record it is about to
    change and the state the record ends the command in: partitions come in groups that end
    in one status, and None as a migration is a new one."""
    for wid, dst in workers:
        rec = state.workers.get(wid)
        src = None if rec is None else rec.state
        if not lifecycle.allowed(lifecycle.WORKER_EDGES, src, dst, command):
            return lifecycle.check(
                lifecycle.WORKER_EDGES, src, dst, command, f"worker {wid}", "worker_id"
            )
    parts = state.partitions
    for group, status in partitions:
        # One command may move 100k partitions: each status they come from is asked once.
        for was in dict.fromkeys(parts[p].status for p in group):
            if not lifecycle.allowed(lifecycle.PARTITION_EDGES, was, status, command):
                p = next(p for p in group if parts[p].status is was)
                return lifecycle.check(
                    lifecycle.PARTITION_EDGES, was, status, command, f"partition {p}", "partition"
                )
    for mid, phase in migrations:
        before = None if mid is None else state.migrations[mid].phase
        if not lifecycle.allowed(lifecycle.MIGRATION_EDGES, before, phase, command):
            what = "a new migration" if mid is None else f"migration {mid}"
            return lifecycle.check(
                lifecycle.MIGRATION_EDGES, before, phase, command, what, "migration_id"
            )
    return None


def leavers(
    state: ClusterState,
    candidates: Iterable[WorkerId],
    *,
    ending: Collection[MigrationId] = (),
    new_owner: Mapping[PartitionId, WorkerId | None] | None = None,
    sourcing: Collection[WorkerId] = (),
    becoming: Mapping[WorkerId, WorkerState] | None = None,
) -> list[WorkerId]:
    """The candidates whose drain this command ends, decided before it changes anything so
    that their DRAINING -> LEFT edge is checked with the rest: a worker DRAINING once the
    command is applied that then owns nothing and sources nothing in flight has left.

    What the command does, as far as that goes: `ending` the migrations it makes terminal,
    `new_owner` the partitions it gives an owner (or none), `sourcing` the sources of the
    migrations it creates, `becoming` the workers whose state it sets."""
    new_owner = new_owner or {}
    becoming = becoming or {}
    gaining: set[WorkerId | None] | None = None
    out: list[WorkerId] = []
    for wid in dict.fromkeys(candidates):
        w = state.workers.get(wid)
        if w is None or becoming.get(wid, w.state) is not WorkerState.DRAINING:
            continue
        if wid in sourcing or any(m not in ending for m in state.sourcing(wid)):
            continue
        if any(new_owner.get(p, wid) == wid for p in state.owned_set(wid)):
            continue
        if gaining is None:
            gaining = set(new_owner.values())
        if wid not in gaining:
            out.append(wid)
    return out


def current_worker(state: ClusterState, worker_id: str, incarnation: int) -> Worker | Rejected:
    """The worker a command from (or about) this process speaks of: it exists, is at
    `incarnation` and may own partitions; or why not."""
    w = state.workers.get(WorkerId(worker_id))
    if w is None:
        return rejected("not_found", f"unknown worker {worker_id}", "worker_id")
    if incarnation != w.incarnation:
        return rejected(
            "conflict", f"stale incarnation {incarnation} (current {w.incarnation})", "incarnation"
        )
    if w.state not in OWNING_WORKER_STATES:
        return rejected("conflict", f"worker {w.worker_id} is {w.state.value}", "worker_id")
    return w


def in_range(state: ClusterState, partition: int) -> bool:
    return partition in state.partitions


def check_moves(
    state: ClusterState, moves: tuple[Move, ...], drained: WorkerId | None = None
) -> Rejected | None:
    """The Rejected that PlanMigrations (drained=None) or DrainWorker would answer, or None.

    Read-only; the service uses it to answer dry runs and to refuse early with the same error.
    """
    if len(moves) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} moves", "moves")
    seen: set[int] = set()
    for i, mv in enumerate(moves):
        where = f"moves[{i}]"
        p = mv.partition
        if not in_range(state, p):
            return rejected("invalid", f"{where}: partition {p} out of range", "partition")
        if p in seen:
            return rejected("invalid", f"{where}: partition {p} appears twice", "partition")
        seen.add(p)
        if drained is not None and mv.source != drained:
            return rejected("invalid", f"{where}: source must be {drained}", "source")
        if mv.target == mv.source:
            return rejected("invalid", f"{where}: target is the source", "to")
        part = state.partitions[p]
        if part.owner != mv.source:
            return rejected(
                "conflict", f"{where}: partition {p} is owned by {part.owner}", "partition"
            )
        if part.status not in (PartitionStatus.ONLINE, PartitionStatus.ASSIGNING):
            return rejected("conflict", f"{where}: partition {p} is {part.status.value}")
        if part.migration is not None and not supersedable(state, part):
            return rejected(
                "conflict",
                f"{where}: partition {p} already moving ({part.migration})",
                "partition",
            )
        target = state.workers.get(mv.target)
        if target is None:
            return rejected("invalid", f"{where}: unknown target worker {mv.target}", "to")
        if target.state is not WorkerState.ACTIVE:
            return rejected(
                "conflict", f"{where}: target {mv.target} is {target.state.value}", "to"
            )
    return None


def supersedable(state: ClusterState, part: Partition) -> bool:
    """A HANDED_OFF migration whose target has not brought the partition online (say its
    checkpoint cannot be loaded) must not pin the partition: a new move replaces it."""
    mid = part.migration
    return mid is not None and state.migrations[mid].phase is MigrationPhase.HANDED_OFF


def create_migrations(
    state: ClusterState, moves: tuple[Move, ...], reason: MigrationReason, now_ms: int
) -> tuple[NewMigration, ...]:
    created: list[NewMigration] = []
    for mv in moves:
        state.migration_seq += 1
        mid = MigrationId(f"m-{state.migration_seq}")
        stale = state.partitions[mv.partition].migration
        if stale is not None:  # check_moves allowed it: HANDED_OFF, never came online
            old = state.migrations[stale]
            finish_migration(state, old, MigrationPhase.ABORTED, f"superseded by {mid}", now_ms)
        state.put_migration(
            Migration(
                migration_id=mid,
                partition=mv.partition,
                source=mv.source,
                target=mv.target,
                phase=MigrationPhase.PLANNED,
                reason=reason,
                created_at_ms=now_ms,
                updated_at_ms=now_ms,
                note="",
            ),
        )
        part = state.partitions[mv.partition]
        state.put_partition(replace(part, migration=mid))
        created.append(
            NewMigration(id=mid, partition=mv.partition, source=mv.source, target=mv.target)
        )
    return tuple(created)


def superseded(state: ClusterState, moves: tuple[Move, ...]) -> list[Migration]:
    """The HANDED_OFF migrations that new migrations for `moves` replace (see supersedable)."""
    return [
        state.migrations[mid]
        for mv in moves
        if (mid := state.partitions[mv.partition].migration) is not None
    ]


def migration_or_reject(state: ClusterState, mid: MigrationId) -> Migration | Rejected:
    m = state.migrations.get(mid)
    if m is None:
        return rejected("not_found", f"unknown migration {mid}", "migration_id")
    return m


def check_assignments(
    state: ClusterState, assignments: tuple[Assignment, ...], dead: set[WorkerId]
) -> Rejected | None:
    """Shared by DeclareDead (dead = the dying set) and AssignPartitions (dead = empty)."""
    if len(assignments) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} assignments", "assignments")
    seen: set[int] = set()
    for i, a in enumerate(assignments):
        where = f"assignments[{i}]"
        if not in_range(state, a.partition):
            return rejected(
                "invalid", f"{where}: partition {a.partition} out of range", "partition"
            )
        if a.partition in seen:
            return rejected("invalid", f"{where}: partition {a.partition} twice", "partition")
        seen.add(a.partition)
        if a.owner is None:
            continue
        owner = state.workers.get(a.owner)
        if owner is None:
            return rejected("invalid", f"{where}: unknown worker {a.owner}", "owner")
        if a.owner in dead:
            return rejected("invalid", f"{where}: {a.owner} is being declared dead", "owner")
        if owner.state is not WorkerState.ACTIVE:
            return rejected("conflict", f"{where}: {a.owner} is {owner.state.value}", "owner")
    return None


def assigning_at(
    state: ClusterState, p: PartitionId, epoch: Epoch, note: str
) -> Partition | Rejected:
    """The partition ``p`` if it is ASSIGNING at exactly ``epoch`` (what a fallback needs),
    and ``note`` says why."""
    bad = note_or_reject(note)
    if bad is not None:
        return bad
    if not in_range(state, p):
        return rejected("invalid", f"partition {p} out of range", "partition")
    part = state.partitions[p]
    if epoch < part.epoch:
        return rejected("stale_epoch", f"epoch {epoch} is older than {part.epoch}", "epoch")
    if epoch > part.epoch:
        return rejected("conflict", f"epoch {epoch} is not issued yet", "epoch")
    if part.status is not PartitionStatus.ASSIGNING or part.owner is None:
        return rejected("conflict", f"partition {p} is {part.status.value}", "partition")
    return part


def note_or_reject(note: str) -> Rejected | None:
    if not 1 <= len(note) <= NOTE_LEN_MAX:
        return rejected("invalid", f"note must be 1..{NOTE_LEN_MAX} chars", "note")
    return None
