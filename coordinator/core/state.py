"""The one function that changes the replicated cluster state: ``apply``.

Every change to the replicated state is decided here, by one handler per command (those of
the cluster's records about itself, in `coordinator/core/bookkeeping.py`); the container it
changes, ``ClusterState`` (`coordinator/core/cluster.py`, re-exported here as
``apply``'s argument type), only keeps its indices true. ``apply`` is deterministic (no
clock, no randomness: both are stamped into commands) and total: every input yields a
Result value. Each handler validates completely before its first mutation, so a Rejected
never changes the state; that includes asking the lifecycle tables
(`coordinator/core/lifecycle.py`) about every worker, partition and migration change it is
about to make. Invariants kept (`coordinator/core/invariants.py` checks them in the property
tests and the simulation):

- a partition has at most one owner; an owner exists and is ACTIVE or DRAINING;
- a partition's epoch never decreases and grows by one with every (re)assignment;
- ``partition.migration`` names a non-terminal migration of that partition; a PLANNED or
  RELEASING migration's partition is owned by its source, a HANDED_OFF one's by its target;
- ``generation`` grows by exactly one per command that changes some (owner, epoch) pair.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Literal

from coordinator.core import bookkeeping, lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    AbortMigration,
    AbortResult,
    Assignment,
    AssignPartitions,
    AssignResult,
    Barrier,
    BarrierResult,
    Bootstrap,
    BootstrapResult,
    CheckpointsResult,
    CheckpointVerdict,
    Command,
    DeclareDead,
    DeclareDeadResult,
    DrainResult,
    DrainWorker,
    FallBack,
    FallBackResult,
    FinalizeVersion,
    HandOff,
    HandOffResult,
    MarkStuck,
    Move,
    NewMigration,
    Ok,
    OnlineResult,
    PartitionOnline,
    PlanMigrations,
    PlanResult,
    RecordBackup,
    RecordCheckpoints,
    RegisterResult,
    RegisterWorker,
    Rejected,
    ReleaseResult,
    ReportVersions,
    ResetPartition,
    ResetResult,
    Result,
    StartRelease,
    StartWarm,
    StuckResult,
    rejected,
)
from coordinator.core.model import (
    ADDRESS_LEN_MAX,
    BATCH_ITEMS_MAX,
    CHECKPOINTS_KEPT_MAX,
    HISTORY_PER_PARTITION_MAX,
    NOTE_LEN_MAX,
    OWNING_WORKER_STATES,
    REQUESTS_RETAINED_MAX,
    TERMINAL_MIGRATIONS_RETAINED_MAX,
    TERMINAL_PHASES,
    TOTAL_PARTITIONS_MAX,
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
    valid_id,
)
from coordinator.core.versions import INTRODUCED_IN

__all__ = ["ClusterState", "apply", "check_moves"]


# --- apply -------------------------------------------------------------------------------------


def apply(state: ClusterState, request_id: str, cmd: Command) -> Result:
    """Apply one committed command. Never raises on any well-typed command.

    A request id already in the table returns the recorded result and changes nothing.
    Only Ok results are recorded: a Rejected changed nothing, so re-evaluating a retried
    rejected command can at most apply it once, and rejected junk cannot flush the table.
    Barrier bypasses the table: it is a read fence, retrying it must really go through the log.
    A command of a command-set version above the finalized one is rejected as the leader's
    gate would have refused it (coordinator/core/versions.py), on every replica alike.
    """
    if isinstance(cmd, Barrier):
        return Ok(value=BarrierResult(nonce=cmd.nonce))
    recorded = state.requests.get(request_id)
    if recorded is not None:
        return recorded
    version = INTRODUCED_IN[cmd.TAG]
    if version > state.finalized_version:
        return rejected(
            "version_not_finalized",
            f"{type(cmd).__name__} needs command-set version {version}; the cluster is "
            f"finalized at {state.finalized_version}",
            "command_set_version",
        )
    result, ownership_changed = _dispatch(state, cmd)
    if isinstance(result, Ok):
        if ownership_changed:
            state.generation += 1
        state.requests[request_id] = result
        while len(state.requests) > REQUESTS_RETAINED_MAX:
            state.requests.popitem(last=False)
        state.evict_terminal(TERMINAL_MIGRATIONS_RETAINED_MAX)
    return result


_Outcome = tuple[Result, bool]  # (result, whether some partition's (owner, epoch) changed)


def _dispatch(state: ClusterState, cmd: Command) -> _Outcome:
    if isinstance(cmd, Bootstrap):
        return _bootstrap(state, cmd)
    # The cluster's records about itself need no partition table: a node reports its
    # versions as soon as it starts, before the first leader has bootstrapped.
    if isinstance(cmd, ReportVersions):
        return bookkeeping.report_versions(state, cmd), False
    if isinstance(cmd, FinalizeVersion):
        return bookkeeping.finalize_version(state, cmd), False
    if isinstance(cmd, RecordBackup):
        return bookkeeping.record_backup(state, cmd), False
    if state.total_partitions == 0:
        return rejected("not_bootstrapped", "the cluster is not bootstrapped yet"), False
    match cmd:
        case RegisterWorker():
            return _register_worker(state, cmd)
        case DeclareDead():
            return _declare_dead(state, cmd)
        case AssignPartitions():
            return _assign_partitions(state, cmd)
        case PartitionOnline():
            return _partition_online(state, cmd)
        case PlanMigrations():
            return _plan_migrations(state, cmd)
        case StartRelease():
            return _start_release(state, cmd)
        case StartWarm():
            return _start_warm(state, cmd)
        case HandOff():
            return _hand_off(state, cmd)
        case AbortMigration():
            return _abort_migration(state, cmd)
        case RecordCheckpoints():
            return _record_checkpoints(state, cmd)
        case DrainWorker():
            return _drain_worker(state, cmd)
        case FallBack():
            return _fall_back(state, cmd)
        case MarkStuck():
            return _mark_stuck(state, cmd)
        case ResetPartition():
            return _reset_partition(state, cmd)
        case Barrier():  # handled before dispatch; kept so the match is exhaustive
            return Ok(value=BarrierResult(nonce=cmd.nonce)), False
        case ReportVersions() | FinalizeVersion() | RecordBackup():  # dispatched above
            return rejected("internal", "dispatched before the partition table"), False


# --- changes built from the container's writers --------------------------------------------------


def _reassign(
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


def _accept_checkpoint(part: Partition, new: Checkpoint) -> Partition:
    """``part`` with ``new`` as its checkpoint; the one it replaces joins the fallback chain
    unless ``new`` is at the same offset (the same state: keeping both gains nothing)."""
    old = part.checkpoint
    if old is None or old.uri == new.uri or old.offset >= new.offset:
        return replace(part, checkpoint=new)
    earlier = (old, *part.earlier)[:CHECKPOINTS_KEPT_MAX]
    return replace(part, checkpoint=new, earlier=earlier)


def _finish_migration(
    state: ClusterState, m: Migration, phase: MigrationPhase, note: str, now_ms: int
) -> None:
    """Make ``m`` terminal and detach it from its partition."""
    state.put_migration(replace(m, phase=phase, note=note, updated_at_ms=now_ms))
    part = state.partitions[m.partition]
    if part.migration == m.migration_id:
        state.put_partition(replace(part, migration=None))


def _leave(state: ClusterState, workers: Iterable[WorkerId], now_ms: int) -> bool:
    """Make `workers` (what `_leavers` decided) LEFT; True when there was one."""
    left = False
    for wid in workers:
        state.put_worker(replace(state.workers[wid], state=WorkerState.LEFT, updated_at_ms=now_ms))
        left = True
    return left


# --- lifecycles: every change a handler makes is an edge of its table, checked up front ---------


def _lifecycle_problem(
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


def _leavers(
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


# --- shared validation -------------------------------------------------------------------------


def _in_range(state: ClusterState, partition: int) -> bool:
    return 0 <= partition < state.total_partitions


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
        if not _in_range(state, p):
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
        if part.migration is not None and not _supersedable(state, part):
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


def _supersedable(state: ClusterState, part: Partition) -> bool:
    """A HANDED_OFF migration whose target has not brought the partition online (say its
    checkpoint cannot be loaded) must not pin the partition: a new move replaces it."""
    mid = part.migration
    return mid is not None and state.migrations[mid].phase is MigrationPhase.HANDED_OFF


def _create_migrations(
    state: ClusterState, moves: tuple[Move, ...], reason: MigrationReason, now_ms: int
) -> tuple[NewMigration, ...]:
    created: list[NewMigration] = []
    for mv in moves:
        state.migration_seq += 1
        mid = MigrationId(f"m-{state.migration_seq}")
        stale = state.partitions[mv.partition].migration
        if stale is not None:  # check_moves allowed it: HANDED_OFF, never came online
            old = state.migrations[stale]
            _finish_migration(state, old, MigrationPhase.ABORTED, f"superseded by {mid}", now_ms)
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


def _superseded(state: ClusterState, moves: tuple[Move, ...]) -> list[Migration]:
    """The HANDED_OFF migrations that new migrations for `moves` replace (see _supersedable)."""
    return [
        state.migrations[mid]
        for mv in moves
        if (mid := state.partitions[mv.partition].migration) is not None
    ]


def _migration_or_reject(state: ClusterState, mid: MigrationId) -> Migration | Rejected:
    m = state.migrations.get(mid)
    if m is None:
        return rejected("not_found", f"unknown migration {mid}", "migration_id")
    return m


# --- handlers ----------------------------------------------------------------------------------


def _bootstrap(state: ClusterState, cmd: Bootstrap) -> _Outcome:
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
    state.partitions = [
        Partition(
            partition=PartitionId(p),
            owner=None,
            epoch=Epoch(0),
            status=PartitionStatus.UNASSIGNED,
            migration=None,
            checkpoint=None,
            history=(),
        )
        for p in range(total)
    ]
    # Creating unowned partitions at epoch 0 changes no (owner, epoch): generation stays.
    return Ok(value=BootstrapResult(total_partitions=total, created=True)), False


def _register_worker(state: ClusterState, cmd: RegisterWorker) -> _Outcome:
    wid = cmd.worker_id
    if not valid_id(wid):
        return rejected("invalid", "worker_id must match [A-Za-z0-9._-]{1,64}", "worker_id"), False
    if not 1 <= len(cmd.address) <= ADDRESS_LEN_MAX:
        return rejected("invalid", f"address must be 1..{ADDRESS_LEN_MAX} chars", "address"), False
    now = cmd.now_ms
    old = state.workers.get(wid)
    # A restarted process lost its gates: abort what it was doing that is not yet handed off.
    to_abort = [
        m
        for m in state.in_flight_migrations()
        if wid in (m.source, m.target) and m.phase is not MigrationPhase.HANDED_OFF
    ]
    rehosted = state.owned_by(wid)
    # The sources that closed their gate for a target that restarted.
    reopened = [m for m in to_abort if m.phase is MigrationPhase.RELEASING and m.source != wid]
    new_owner = dict.fromkeys(rehosted, wid) | {m.partition: m.source for m in reopened}
    leaving = _leavers(
        state,
        (m.source for m in to_abort),
        ending={m.migration_id for m in to_abort},
        new_owner=new_owner,
        becoming={wid: WorkerState.ACTIVE},
    )
    problem = _lifecycle_problem(
        state,
        "RegisterWorker",
        workers=[(wid, WorkerState.ACTIVE), *((w, WorkerState.LEFT) for w in leaving)],
        partitions=[(new_owner.keys(), PartitionStatus.ASSIGNING)],
        migrations=((m.migration_id, MigrationPhase.ABORTED) for m in to_abort),
    )
    if problem is not None:
        return problem, False
    for m in to_abort:
        _finish_migration(state, m, MigrationPhase.ABORTED, "worker re-registered", now)
    for p in rehosted:
        # Same owner, new epoch: the old process is fenced; the leader re-hosts on the new one.
        # A HANDED_OFF migration into this worker stays attached and completes when it is online.
        _reassign(
            state,
            p,
            owner=wid,
            reason=ChangeReason.RESTART,
            now_ms=now,
            migration=state.partitions[p].migration,
        )
    bumped = list(rehosted)
    for m in reopened:
        # The source closed its gate for a target that restarted: reopen under a new epoch.
        _reassign(
            state,
            m.partition,
            owner=m.source,
            reason=ChangeReason.ABORT,
            now_ms=now,
            migration=None,
        )
        bumped.append(m.partition)
    if old is None:
        worker = Worker(
            worker_id=wid,
            address=cmd.address,
            incarnation=1,
            state=WorkerState.ACTIVE,
            registered_at_ms=now,
            updated_at_ms=now,
        )
    else:
        worker = replace(
            old,
            address=cmd.address,
            incarnation=old.incarnation + 1,
            state=WorkerState.ACTIVE,
            updated_at_ms=now,
        )
    state.put_worker(worker)
    _leave(state, leaving, now)
    value = RegisterResult(worker_id=wid, incarnation=worker.incarnation, rehosted=tuple(rehosted))
    return Ok(value=value), bool(bumped)


def _check_assignments(
    state: ClusterState, assignments: tuple[Assignment, ...], dead: set[WorkerId]
) -> Rejected | None:
    """Shared by DeclareDead (dead = the dying set) and AssignPartitions (dead = empty)."""
    if len(assignments) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} assignments", "assignments")
    seen: set[int] = set()
    for i, a in enumerate(assignments):
        where = f"assignments[{i}]"
        if not _in_range(state, a.partition):
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


def _declare_dead(state: ClusterState, cmd: DeclareDead) -> _Outcome:
    now = cmd.now_ms
    if not cmd.worker_ids:
        return rejected("invalid", "worker_ids must not be empty", "worker_ids"), False
    if len(cmd.worker_ids) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} workers", "worker_ids"), False
    dead: set[WorkerId] = set()
    for wid in cmd.worker_ids:
        if wid in dead:
            return rejected("invalid", f"worker {wid} listed twice", "worker_ids"), False
        dead.add(wid)
        w = state.workers.get(wid)
        if w is None:
            return rejected("not_found", f"unknown worker {wid}", "worker_ids"), False
        if w.state not in OWNING_WORKER_STATES:
            return rejected("conflict", f"worker {wid} is {w.state.value}", "worker_ids"), False
    bad = _check_assignments(state, cmd.assignments, dead)
    if bad is not None:
        return bad, False
    orphaned: set[int] = set()
    for wid in dead:
        orphaned |= state.owned_set(wid)
    new_owner = {a.partition: a.owner for a in cmd.assignments}
    if new_owner.keys() != orphaned:
        missing = len(orphaned - new_owner.keys())
        extra = len(new_owner.keys() - orphaned)
        return rejected(
            "invalid",
            "assignments must cover exactly the dead workers' partitions "
            f"({missing} missing, {extra} not theirs)",
            "assignments",
        ), False

    handed_off: list[Migration] = []
    aborted: list[tuple[Migration, str]] = []
    reopen: list[Migration] = []
    for m in state.in_flight_migrations():
        # The source's gate is open (PLANNED, WARMING) or closing (RELEASING).
        releasing_or_planned = m.phase in (
            MigrationPhase.PLANNED,
            MigrationPhase.WARMING,
            MigrationPhase.RELEASING,
        )
        if m.source in dead and releasing_or_planned:
            if new_owner[m.partition] == m.target:
                # The dead-source hand-off: the target resumes from the last accepted checkpoint.
                handed_off.append(m)
            else:
                aborted.append((m, "source dead"))
        elif m.target in dead:
            aborted.append((m, "target dead"))
            if m.phase is MigrationPhase.RELEASING:
                # The live source closed its gate for this move; reopen under a new epoch.
                reopen.append(m)
    leaving = _leavers(
        state,
        (m.source for m, _ in aborted),
        ending={m.migration_id for m, _ in aborted},
        new_owner=new_owner | {m.partition: m.source for m in reopen} if reopen else new_owner,
        becoming=dict.fromkeys(dead, WorkerState.DEAD),
    )
    assigning, unassigned = PartitionStatus.ASSIGNING, PartitionStatus.UNASSIGNED
    problem = _lifecycle_problem(
        state,
        "DeclareDead",
        workers=[
            *((w, WorkerState.DEAD) for w in cmd.worker_ids),
            *((w, WorkerState.LEFT) for w in leaving),
        ],
        partitions=[
            ([p for p, owner in new_owner.items() if owner is not None], assigning),
            ([p for p, owner in new_owner.items() if owner is None], unassigned),
            ([m.partition for m in reopen], assigning),
        ],
        migrations=[
            *((m.migration_id, MigrationPhase.HANDED_OFF) for m in handed_off),
            *((m.migration_id, MigrationPhase.ABORTED) for m, _ in aborted),
        ],
    )
    if problem is not None:
        return problem, False
    # Validation done; from here on nothing can be rejected.
    for m in handed_off:
        state.put_migration(replace(m, phase=MigrationPhase.HANDED_OFF, updated_at_ms=now))
    for m, note in aborted:
        _finish_migration(state, m, MigrationPhase.ABORTED, note, now)
    for wid in cmd.worker_ids:
        state.put_worker(replace(state.workers[wid], state=WorkerState.DEAD, updated_at_ms=now))
    for a in cmd.assignments:
        _reassign(
            state,
            a.partition,
            owner=a.owner,
            reason=ChangeReason.FAILURE,
            now_ms=now,
            migration=state.partitions[a.partition].migration,  # kept only if handed off
        )
    for m in reopen:
        _reassign(
            state,
            m.partition,
            owner=m.source,
            reason=ChangeReason.ABORT,
            now_ms=now,
            migration=None,
        )
    _leave(state, leaving, now)
    value = DeclareDeadResult(
        dead=cmd.worker_ids,
        reassigned=len(cmd.assignments),
        handed_off=tuple(m.migration_id for m in handed_off),
        aborted=tuple(m.migration_id for m, _ in aborted),
    )
    return Ok(value=value), bool(cmd.assignments or reopen)


def _assign_partitions(state: ClusterState, cmd: AssignPartitions) -> _Outcome:
    bad = _check_assignments(state, cmd.assignments, set())
    if bad is not None:
        return bad, False
    for i, a in enumerate(cmd.assignments):
        if a.owner is None:
            return rejected("invalid", f"assignments[{i}]: owner is required", "owner"), False
    # Only an UNASSIGNED partition is assigned (its table says so).
    problem = _lifecycle_problem(
        state,
        "AssignPartitions",
        partitions=[([a.partition for a in cmd.assignments], PartitionStatus.ASSIGNING)],
    )
    if problem is not None:
        return problem, False
    for a in cmd.assignments:
        _reassign(
            state,
            a.partition,
            owner=a.owner,
            reason=ChangeReason.ASSIGNED,
            now_ms=cmd.now_ms,
            migration=None,
        )
    return Ok(value=AssignResult(assigned=len(cmd.assignments))), bool(cmd.assignments)


def _partition_online(state: ClusterState, cmd: PartitionOnline) -> _Outcome:
    p = cmd.partition
    if not _in_range(state, p):
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
    leaving = _leavers(state, () if done is None else (done.source,), ending=finished)
    problem = _lifecycle_problem(
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
        if _leave(state, leaving, cmd.now_ms):
            value = replace(value, left=done.source)
    return Ok(value=value), False


def _plan_migrations(state: ClusterState, cmd: PlanMigrations) -> _Outcome:
    bad = check_moves(state, cmd.moves, None)
    if bad is not None:
        return bad, False
    superseded = _superseded(state, cmd.moves)
    leaving = _leavers(
        state,
        (m.source for m in superseded),
        ending={m.migration_id for m in superseded},
        sourcing={mv.source for mv in cmd.moves},
    )
    problem = _lifecycle_problem(
        state,
        "PlanMigrations",
        workers=((w, WorkerState.LEFT) for w in leaving),
        migrations=[
            *([(None, MigrationPhase.PLANNED)] if cmd.moves else []),
            *((m.migration_id, MigrationPhase.ABORTED) for m in superseded),
        ],
    )
    if problem is not None:
        return problem, False
    _leave(state, leaving, cmd.now_ms)
    created = _create_migrations(state, cmd.moves, cmd.reason, cmd.now_ms)
    return Ok(value=PlanResult(migrations=created)), False


def _start_release(state: ClusterState, cmd: StartRelease) -> _Outcome:
    m = _migration_or_reject(state, cmd.migration_id)
    if isinstance(m, Rejected):
        return m, False
    value = ReleaseResult(
        migration_id=m.migration_id, phase=MigrationPhase.RELEASING, changed=False
    )
    if m.phase is MigrationPhase.RELEASING:
        return Ok(value=value), False
    problem = _lifecycle_problem(
        state, "StartRelease", migrations=((m.migration_id, MigrationPhase.RELEASING),)
    )
    if problem is not None:
        return problem, False
    state.put_migration(replace(m, phase=MigrationPhase.RELEASING, updated_at_ms=cmd.now_ms))
    return Ok(value=replace(value, changed=True)), False


def _start_warm(state: ClusterState, cmd: StartWarm) -> _Outcome:
    m = _migration_or_reject(state, cmd.migration_id)
    if isinstance(m, Rejected):
        return m, False
    value = ReleaseResult(migration_id=m.migration_id, phase=MigrationPhase.WARMING, changed=False)
    if m.phase is MigrationPhase.WARMING:
        return Ok(value=value), False
    problem = _lifecycle_problem(
        state, "StartWarm", migrations=((m.migration_id, MigrationPhase.WARMING),)
    )
    if problem is not None:
        return problem, False
    state.put_migration(replace(m, phase=MigrationPhase.WARMING, updated_at_ms=cmd.now_ms))
    return Ok(value=replace(value, changed=True)), False


def _hand_off(state: ClusterState, cmd: HandOff) -> _Outcome:
    m = _migration_or_reject(state, cmd.migration_id)
    if isinstance(m, Rejected):
        return m, False
    part = state.partitions[m.partition]
    if m.phase is MigrationPhase.HANDED_OFF:
        value = HandOffResult(
            migration_id=m.migration_id,
            partition=m.partition,
            owner=part.owner,
            epoch=part.epoch,
            checkpoint=None,
            changed=False,
        )
        return Ok(value=value), False
    # PLANNED is not a source of HandOff (lifecycle.py says why): StartRelease comes first.
    problem = _lifecycle_problem(
        state,
        "HandOff",
        partitions=[([m.partition], PartitionStatus.ASSIGNING)],
        migrations=((m.migration_id, MigrationPhase.HANDED_OFF),),
    )
    if problem is not None:
        return problem, False
    target = state.workers[m.target]
    if target.state is not WorkerState.ACTIVE:
        return rejected("conflict", f"target {m.target} is {target.state.value}", "to"), False
    final = cmd.checkpoint
    current = part.checkpoint
    use_final = (
        final is not None
        and final.epoch == part.epoch
        and (current is None or final.offset >= current.offset)
    )
    if final is not None and use_final:
        accepted = Checkpoint(
            offset=final.offset, uri=final.uri, epoch=final.epoch, at_ms=cmd.now_ms
        )
        state.put_partition(_accept_checkpoint(part, accepted))
    # Otherwise a missing, stale or backwards final checkpoint is ignored: the target
    # resumes from the last accepted one.
    reason = ChangeReason.DRAIN if m.reason is MigrationReason.DRAIN else ChangeReason.MIGRATION
    _reassign(
        state,
        m.partition,
        owner=m.target,
        reason=reason,
        now_ms=cmd.now_ms,
        migration=m.migration_id,
    )
    state.put_migration(replace(m, phase=MigrationPhase.HANDED_OFF, updated_at_ms=cmd.now_ms))
    value = HandOffResult(
        migration_id=m.migration_id,
        partition=m.partition,
        owner=m.target,
        epoch=state.partitions[m.partition].epoch,
        checkpoint="final" if use_final else "last_accepted",
        changed=True,
    )
    return Ok(value=value), True


def _abort_migration(state: ClusterState, cmd: AbortMigration) -> _Outcome:
    m = _migration_or_reject(state, cmd.migration_id)
    if isinstance(m, Rejected):
        return m, False
    if m.phase in TERMINAL_PHASES:
        return rejected(
            "conflict",
            f"migration {m.migration_id} already finished ({m.phase.value})",
            "migration_id",
        ), False
    # A RELEASING source closed its gate when asked to release: it reopens under a new epoch.
    rehost = m.phase is MigrationPhase.RELEASING
    leaving = _leavers(state, (m.source,), ending=(m.migration_id,))
    problem = _lifecycle_problem(
        state,
        "AbortMigration",
        workers=((w, WorkerState.LEFT) for w in leaving),
        partitions=[([m.partition] if rehost else [], PartitionStatus.ASSIGNING)],
        migrations=((m.migration_id, MigrationPhase.ABORTED),),
    )
    if problem is not None:
        return problem, False
    _finish_migration(state, m, MigrationPhase.ABORTED, cmd.note, cmd.now_ms)
    if m.phase is MigrationPhase.HANDED_OFF:
        # The target owns the partition since the hand-off but never brought it online (a
        # PartitionOnline would have made the migration DONE): the source released it, so
        # it stays with the target, and the migration no longer pins it (reassign, drain).
        _leave(state, leaving, cmd.now_ms)
        value = AbortResult(
            migration_id=m.migration_id, phase=MigrationPhase.ABORTED, rehosted=False
        )
        return Ok(value=value), False
    if rehost:
        _reassign(
            state,
            m.partition,
            owner=m.source,
            reason=ChangeReason.ABORT,
            now_ms=cmd.now_ms,
            migration=None,
        )
    value = AbortResult(migration_id=m.migration_id, phase=MigrationPhase.ABORTED, rehosted=rehost)
    return Ok(value=value), rehost


def _record_checkpoints(state: ClusterState, cmd: RecordCheckpoints) -> _Outcome:
    w = state.workers.get(cmd.worker_id)
    if w is None:
        return rejected("not_found", f"unknown worker {cmd.worker_id}", "worker_id"), False
    if cmd.incarnation != w.incarnation:
        return rejected(
            "conflict",
            f"stale incarnation {cmd.incarnation} (current {w.incarnation})",
            "incarnation",
        ), False
    if w.state not in OWNING_WORKER_STATES:
        return rejected("conflict", f"worker {w.worker_id} is {w.state.value}", "worker_id"), False
    if len(cmd.entries) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} entries", "entries"), False
    results: list[CheckpointVerdict] = []
    for e in cmd.entries:
        reason: str | None = None
        if not _in_range(state, e.partition):
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
                state.put_partition(_accept_checkpoint(part, checkpoint))
        status: Literal["accepted", "fenced"] = "fenced" if reason is not None else "accepted"
        results.append(CheckpointVerdict(partition=e.partition, status=status, reason=reason))
    return Ok(value=CheckpointsResult(results=tuple(results))), False


def _drain_worker(state: ClusterState, cmd: DrainWorker) -> _Outcome:
    wid = cmd.worker_id
    w = state.workers.get(wid)
    if w is None:
        return rejected("not_found", f"unknown worker {wid}", "worker_id"), False
    if w.state not in OWNING_WORKER_STATES:
        return rejected("conflict", f"worker {wid} is {w.state.value}", "worker_id"), False
    bad = check_moves(state, cmd.moves, wid)
    if bad is not None:
        return bad, False
    superseded = _superseded(state, cmd.moves)
    leaving = _leavers(
        state,
        (wid, *(m.source for m in superseded)),
        ending={m.migration_id for m in superseded},
        sourcing={mv.source for mv in cmd.moves},
        becoming={wid: WorkerState.DRAINING},
    )
    workers = [(x, WorkerState.LEFT) for x in leaving]
    if w.state is WorkerState.ACTIVE and wid not in leaving:
        workers.append((wid, WorkerState.DRAINING))
    problem = _lifecycle_problem(
        state,
        "DrainWorker",
        workers=workers,
        migrations=[
            *([(None, MigrationPhase.PLANNED)] if cmd.moves else []),
            *((m.migration_id, MigrationPhase.ABORTED) for m in superseded),
        ],
    )
    if problem is not None:
        return problem, False
    if w.state is WorkerState.ACTIVE:
        state.put_worker(replace(w, state=WorkerState.DRAINING, updated_at_ms=cmd.now_ms))
    created = _create_migrations(state, cmd.moves, MigrationReason.DRAIN, cmd.now_ms)
    _leave(state, leaving, cmd.now_ms)
    value = DrainResult(worker_id=wid, state=state.workers[wid].state, migrations=created)
    return Ok(value=value), False


def _assigning_at(
    state: ClusterState, p: PartitionId, epoch: Epoch, note: str
) -> Partition | Rejected:
    """The partition ``p`` if it is ASSIGNING at exactly ``epoch`` (what a fallback needs),
    and ``note`` says why."""
    bad = _note_or_reject(note)
    if bad is not None:
        return bad
    if not _in_range(state, p):
        return rejected("invalid", f"partition {p} out of range", "partition")
    part = state.partitions[p]
    if epoch < part.epoch:
        return rejected("stale_epoch", f"epoch {epoch} is older than {part.epoch}", "epoch")
    if epoch > part.epoch:
        return rejected("conflict", f"epoch {epoch} is not issued yet", "epoch")
    if part.status is not PartitionStatus.ASSIGNING or part.owner is None:
        return rejected("conflict", f"partition {p} is {part.status.value}", "partition")
    return part


def _note_or_reject(note: str) -> Rejected | None:
    if not 1 <= len(note) <= NOTE_LEN_MAX:
        return rejected("invalid", f"note must be 1..{NOTE_LEN_MAX} chars", "note")
    return None


def _fall_back(state: ClusterState, cmd: FallBack) -> _Outcome:
    part = _assigning_at(state, cmd.partition, cmd.epoch, cmd.note)
    if isinstance(part, Rejected):
        return part, False
    if part.checkpoint is None:
        return rejected("conflict", f"partition {part.partition} has no checkpoint"), False
    to = cmd.checkpoint
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
    problem = _lifecycle_problem(
        state, "FallBack", partitions=[([part.partition], PartitionStatus.ASSIGNING)]
    )
    if problem is not None:
        return problem, False
    state.put_partition(replace(part, checkpoint=checkpoint, earlier=earlier, stuck=""))
    _reassign(
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


def _mark_stuck(state: ClusterState, cmd: MarkStuck) -> _Outcome:
    part = _assigning_at(state, cmd.partition, cmd.epoch, cmd.note)
    if isinstance(part, Rejected):
        return part, False
    state.put_partition(replace(part, stuck=cmd.note))
    return Ok(value=StuckResult(partition=part.partition, stuck=cmd.note)), False


def _reset_partition(state: ClusterState, cmd: ResetPartition) -> _Outcome:
    p = cmd.partition
    if not _in_range(state, p):
        return rejected("invalid", f"partition {p} out of range", "partition"), False
    bad = _note_or_reject(cmd.note)
    if bad is not None:
        return bad, False
    part = state.partitions[p]
    if part.status is not PartitionStatus.ASSIGNING or part.owner is None:
        # An ONLINE partition's owner holds its state: resetting it would only lose that.
        return rejected(
            "conflict", f"partition {p} is {part.status.value}; only an assigning one resets"
        ), False
    problem = _lifecycle_problem(
        state, "ResetPartition", partitions=[([p], PartitionStatus.ASSIGNING)]
    )
    if problem is not None:
        return problem, False
    state.put_partition(replace(part, checkpoint=None, earlier=(), stuck=""))
    _reassign(
        state,
        p,
        owner=part.owner,
        reason=ChangeReason.RESET,
        now_ms=cmd.now_ms,
        migration=part.migration,
        note=cmd.note,
    )
    return Ok(value=ResetResult(partition=p, epoch=state.partitions[p].epoch)), True
