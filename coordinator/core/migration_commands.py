"""`apply`'s handlers of a migration's steps: PlanMigrations, StartWarm, StartRelease, HandOff and
AbortMigration. Each validates completely, asks the lifecycle tables, then changes the state
(coordinator/core/state.py's contract).
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.core import edits
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    AbortMigration,
    AbortResult,
    HandOff,
    HandOffResult,
    Ok,
    PlanMigrations,
    PlanResult,
    Rejected,
    ReleaseResult,
    StartRelease,
    StartWarm,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    TERMINAL_PHASES,
    ChangeReason,
    Checkpoint,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionStatus,
    WorkerState,
)

__all__ = ["abort_migration", "hand_off", "plan_migrations", "start_release", "start_warm"]


def plan_migrations(state: ClusterState, cmd: PlanMigrations) -> Outcome:
    bad = edits.check_moves(state, cmd.moves, None)
    if bad is not None:
        return bad, False
    superseded = edits.superseded(state, cmd.moves)
    leaving = edits.leavers(
        state,
        (m.source for m in superseded),
        ending={m.migration_id for m in superseded},
        sourcing={mv.source for mv in cmd.moves},
    )
    problem = edits.lifecycle_problem(
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
    edits.leave(state, leaving, cmd.now_ms)
    created = edits.create_migrations(state, cmd.moves, cmd.reason, cmd.now_ms)
    return Ok(value=PlanResult(migrations=created)), False


def start_release(state: ClusterState, cmd: StartRelease) -> Outcome:
    return _enter(state, cmd.migration_id, MigrationPhase.RELEASING, "StartRelease", cmd.now_ms)


def start_warm(state: ClusterState, cmd: StartWarm) -> Outcome:
    return _enter(state, cmd.migration_id, MigrationPhase.WARMING, "StartWarm", cmd.now_ms)


def _enter(
    state: ClusterState, mid: MigrationId, phase: MigrationPhase, command: str, now_ms: int
) -> Outcome:
    """A migration into `phase` (a step that changes no owner or epoch); already there: Ok
    with changed false, so a retried step is harmless."""
    m = edits.migration_or_reject(state, mid)
    if isinstance(m, Rejected):
        return m, False
    value = ReleaseResult(migration_id=m.migration_id, phase=phase, changed=False)
    if m.phase is phase:
        return Ok(value=value), False
    problem = edits.lifecycle_problem(state, command, migrations=((m.migration_id, phase),))
    if problem is not None:
        return problem, False
    state.put_migration(replace(m, phase=phase, updated_at_ms=now_ms))
    return Ok(value=replace(value, changed=True)), False


def hand_off(state: ClusterState, cmd: HandOff) -> Outcome:
    m = edits.migration_or_reject(state, cmd.migration_id)
    if isinstance(m, Rejected):
        return m, False
    if not edits.in_range(state, m.partition):
        # A migration of a partition table a rescale replaced: it ended with that table.
        problem = edits.lifecycle_problem(
            state, "HandOff", migrations=((m.migration_id, MigrationPhase.HANDED_OFF),)
        )
        return problem or rejected("internal", "a migration in flight beyond the table"), False
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
    problem = edits.lifecycle_problem(
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
        state.put_partition(
            edits.accept_checkpoint(part, accepted, rescaled=edits.rescaled(state, part))
        )
    # Otherwise a missing, stale or backwards final checkpoint is ignored: the target
    # resumes from the last accepted one.
    reason = ChangeReason.DRAIN if m.reason is MigrationReason.DRAIN else ChangeReason.MIGRATION
    edits.reassign(
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


def abort_migration(state: ClusterState, cmd: AbortMigration) -> Outcome:
    m = edits.migration_or_reject(state, cmd.migration_id)
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
    leaving = edits.leavers(state, (m.source,), ending=(m.migration_id,))
    problem = edits.lifecycle_problem(
        state,
        "AbortMigration",
        workers=((w, WorkerState.LEFT) for w in leaving),
        partitions=[([m.partition] if rehost else [], PartitionStatus.ASSIGNING)],
        migrations=((m.migration_id, MigrationPhase.ABORTED),),
    )
    if problem is not None:
        return problem, False
    edits.finish_migration(state, m, MigrationPhase.ABORTED, cmd.note, cmd.now_ms)
    if m.phase is MigrationPhase.HANDED_OFF:
        # The target owns the partition since the hand-off but never brought it online (a
        # PartitionOnline would have made the migration DONE): the source released it, so
        # it stays with the target, and the migration no longer pins it (reassign, drain).
        edits.leave(state, leaving, cmd.now_ms)
        value = AbortResult(
            migration_id=m.migration_id, phase=MigrationPhase.ABORTED, rehosted=False
        )
        return Ok(value=value), False
    if rehost:
        edits.reassign(
            state,
            m.partition,
            owner=m.source,
            reason=ChangeReason.ABORT,
            now_ms=cmd.now_ms,
            migration=None,
        )
    value = AbortResult(migration_id=m.migration_id, phase=MigrationPhase.ABORTED, rehosted=rehost)
    return Ok(value=value), rehost
