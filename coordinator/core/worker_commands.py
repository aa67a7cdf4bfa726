"""`apply`'s handlers of the commands about workers: RegisterWorker (a new worker, or a new
incarnation of one), DeclareDead (the liveness verdict and its reassignments) and DrainWorker
(an operator's or a worker's leave). Each validates completely, asks the lifecycle tables,
then changes the state (coordinator/core/state.py's contract).
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.core import edits, retirement
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    DeclareDead,
    DeclareDeadResult,
    DrainResult,
    DrainWorker,
    Ok,
    ProfileResult,
    ProfileWorker,
    RegisterResult,
    RegisterWorker,
    Rejected,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    ADDRESS_LEN_MAX,
    BATCH_ITEMS_MAX,
    OWNING_WORKER_STATES,
    WORKER_LABELS_MAX,
    WORKER_SLOTS_MAX,
    ChangeReason,
    Migration,
    MigrationPhase,
    MigrationReason,
    PartitionStatus,
    Worker,
    WorkerId,
    WorkerProfile,
    WorkerState,
    valid_id,
)
from coordinator.core.pipeline_commands import labels_problem

__all__ = ["declare_dead", "drain_worker", "register_worker"]


def register_worker(state: ClusterState, cmd: RegisterWorker) -> Outcome:
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
    reopened: list[Migration] = []
    leaving: list[WorkerId] = []
    if not to_abort and not rehosted:
        # Most registrations (a new worker, one that owned nothing): no partition or migration
        # changes and no drain ends, so its own edge is the one change the tables are asked.
        problem = edits.lifecycle_problem(
            state, "RegisterWorker", workers=[(wid, WorkerState.ACTIVE)]
        )
    else:
        # The sources that closed their gate for a target that restarted.
        reopened = [m for m in to_abort if m.phase is MigrationPhase.RELEASING and m.source != wid]
        new_owner = dict.fromkeys(rehosted, wid) | {m.partition: m.source for m in reopened}
        leaving = edits.leavers(
            state,
            (m.source for m in to_abort),
            ending={m.migration_id for m in to_abort},
            new_owner=new_owner,
            becoming={wid: WorkerState.ACTIVE},
        )
        problem = edits.lifecycle_problem(
            state,
            "RegisterWorker",
            workers=[(wid, WorkerState.ACTIVE), *((w, WorkerState.LEFT) for w in leaving)],
            partitions=[(new_owner.keys(), PartitionStatus.ASSIGNING)],
            migrations=((m.migration_id, MigrationPhase.ABORTED) for m in to_abort),
        )
    if problem is not None:
        return problem, False
    for m in to_abort:
        edits.finish_migration(state, m, MigrationPhase.ABORTED, "worker re-registered", now)
    for p in rehosted:
        # Same owner, new epoch: the old process is fenced; the leader re-hosts on the new one.
        # A HANDED_OFF migration into this worker stays attached and completes when it is online.
        edits.reassign(
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
        edits.reassign(
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
            # Above every retired incarnation: a retired id's old tokens never match again.
            incarnation=retirement.first_incarnation(state),
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
            profile=None,  # the new process says its own (ProfileWorker)
        )
    state.put_worker(worker)
    edits.leave(state, leaving, now)
    value = RegisterResult(worker_id=wid, incarnation=worker.incarnation, rehosted=tuple(rehosted))
    return Ok(value=value), bool(bumped)


def profile_worker(state: ClusterState, cmd: ProfileWorker) -> Outcome:
    """The worker's labels and slots, for its current incarnation only: a profile of a
    process that has since re-registered is refused, so it never describes its successor."""
    old = edits.current_worker(state, cmd.worker_id, cmd.incarnation)
    if isinstance(old, Rejected):
        return old, False
    problem = labels_problem(cmd.labels, WORKER_LABELS_MAX, "labels")
    if problem is not None:
        return problem, False
    if not 1 <= cmd.slots <= WORKER_SLOTS_MAX:
        return rejected("invalid", f"slots must be 1..{WORKER_SLOTS_MAX}", "slots"), False
    profile = WorkerProfile(labels=tuple(sorted(cmd.labels)), slots=cmd.slots)
    changed = old.profile != profile
    if changed:
        state.put_worker(replace(old, profile=profile))
    value = ProfileResult(worker_id=old.worker_id, incarnation=old.incarnation, changed=changed)
    return Ok(value=value), False


def declare_dead(state: ClusterState, cmd: DeclareDead) -> Outcome:
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
    bad = edits.check_assignments(state, cmd.assignments, dead)
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
    leaving = edits.leavers(
        state,
        (m.source for m, _ in aborted),
        ending={m.migration_id for m, _ in aborted},
        new_owner=new_owner | {m.partition: m.source for m in reopen} if reopen else new_owner,
        becoming=dict.fromkeys(dead, WorkerState.DEAD),
    )
    assigning, unassigned = PartitionStatus.ASSIGNING, PartitionStatus.UNASSIGNED
    problem = edits.lifecycle_problem(
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
        edits.finish_migration(state, m, MigrationPhase.ABORTED, note, now)
    for wid in cmd.worker_ids:
        state.put_worker(replace(state.workers[wid], state=WorkerState.DEAD, updated_at_ms=now))
    for a in cmd.assignments:
        edits.reassign(
            state,
            a.partition,
            owner=a.owner,
            reason=ChangeReason.FAILURE,
            now_ms=now,
            migration=state.partitions[a.partition].migration,  # kept only if handed off
        )
    for m in reopen:
        edits.reassign(
            state,
            m.partition,
            owner=m.source,
            reason=ChangeReason.ABORT,
            now_ms=now,
            migration=None,
        )
    edits.leave(state, leaving, now)
    value = DeclareDeadResult(
        dead=cmd.worker_ids,
        reassigned=len(cmd.assignments),
        handed_off=tuple(m.migration_id for m in handed_off),
        aborted=tuple(m.migration_id for m, _ in aborted),
    )
    return Ok(value=value), bool(cmd.assignments or reopen)


def drain_worker(state: ClusterState, cmd: DrainWorker) -> Outcome:
    wid = cmd.worker_id
    w = state.workers.get(wid)
    if w is None:
        return rejected("not_found", f"unknown worker {wid}", "worker_id"), False
    if w.state not in OWNING_WORKER_STATES:
        return rejected("conflict", f"worker {wid} is {w.state.value}", "worker_id"), False
    bad = edits.check_moves(state, cmd.moves, wid)
    if bad is not None:
        return bad, False
    superseded = edits.superseded(state, cmd.moves)
    leaving = edits.leavers(
        state,
        (wid, *(m.source for m in superseded)),
        ending={m.migration_id for m in superseded},
        sourcing={mv.source for mv in cmd.moves},
        becoming={wid: WorkerState.DRAINING},
    )
    workers = [(x, WorkerState.LEFT) for x in leaving]
    if w.state is WorkerState.ACTIVE and wid not in leaving:
        workers.append((wid, WorkerState.DRAINING))
    problem = edits.lifecycle_problem(
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
    created = edits.create_migrations(state, cmd.moves, MigrationReason.DRAIN, cmd.now_ms)
    edits.leave(state, leaving, cmd.now_ms)
    value = DrainResult(worker_id=wid, state=state.workers[wid].state, migrations=created)
    return Ok(value=value), False
