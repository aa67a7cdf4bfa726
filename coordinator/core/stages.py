"""The planner's command stages that read the whole cluster: failure detection, assignment,
rebalance on join, migration steps and drains.

Each stage is a function of the applied state, the planner's in-memory parts it names
(liveness, loads, warm-ups, placement) and the times, and returns the commands of that one
stage (empty when it has nothing to do); `coordinator/core/planner.py` runs them in its
fixed order and keeps the batch's ordering rules. A stage changes nothing of the planner's
but the detector's forgotten ids (a dead verdict for a worker the state no longer owns).
"""

from __future__ import annotations

from coordinator.core import pools
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    AbortMigration,
    Assignment,
    AssignPartitions,
    Command,
    DeclareDead,
    DrainWorker,
    PlanMigrations,
    Rejected,
    StartRelease,
    StartWarm,
)
from coordinator.core.liveness import Detector
from coordinator.core.load import LoadBook
from coordinator.core.maintenance import balance_paused
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    OWNING_WORKER_STATES,
    Migration,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionStatus,
    WorkerId,
    WorkerState,
)
from coordinator.core.move_plans import MovePlans
from coordinator.core.planner_settings import PlannerSettings
from coordinator.core.rescale_plans import balance_paused as rescaling
from coordinator.core.throttle import startable
from coordinator.core.versions import version_of
from coordinator.core.warmups import WarmUps

__all__ = [
    "assign_pipelines",
    "assign_unassigned",
    "detect_failures",
    "drains",
    "migrations",
    "rebalance_on_join",
]

# A cluster not yet finalized at StartWarm's command-set version moves cold (a voter of an
# older release would not apply it).
_WARM_VERSION = version_of(StartWarm(migration_id=MigrationId("-"), now_ms=0))


def detect_failures(
    detector: Detector, plans: MovePlans, state: ClusterState, now: int, wall: int
) -> tuple[Command, ...]:
    """The workers the detector finds dead, declared so, their partitions placed anew."""
    # Only the dead: the suspected (say thousands of registered workers that never
    # heartbeat) are not read every tick.
    verdict_dead = detector.dead(now)
    if not verdict_dead:
        return ()
    dead = sorted(
        w
        for w in verdict_dead
        if (rec := state.workers.get(WorkerId(w))) is not None and rec.state in OWNING_WORKER_STATES
    )
    for w in verdict_dead:
        if w not in dead:
            detector.forget(w)
    if not dead:
        return ()
    dead_set = set(dead)
    orphaned = [p for p in state.partitions if p.owner in dead_set]
    assignments = []
    # Placement only for partitions the dead owned: a death storm of workers that own
    # nothing (say thousands registered and never heard from) reads no liveness of
    # every ACTIVE worker.
    eligible = plans.eligible(state, now, dead) if orphaned else []
    ours = eligible and any(p.pipeline == DEFAULT_PIPELINE for p in orphaned)
    target = plans.placement(state, eligible, now) if ours else []
    # A recorded pipeline's go to its own pool (coordinator/core/pools.py), or wait
    # UNASSIGNED for one: never to `default`'s placement.
    theirs = pools.place(state, eligible, [p for p in orphaned if p.pipeline != DEFAULT_PIPELINE])
    for p in orphaned:
        new_owner: str | None
        if p.pipeline != DEFAULT_PIPELINE:
            new_owner = theirs.get(p.partition)
        else:
            new_owner = target[p.partition] if eligible else None
        if p.migration is not None:
            mig = state.migrations[p.migration]
            # A dead source hands off to its migration's target (with the last accepted
            # checkpoint) instead of a fresh placement choice.
            if (
                mig.source == p.owner
                and mig.target in eligible
                and mig.phase
                in (MigrationPhase.PLANNED, MigrationPhase.WARMING, MigrationPhase.RELEASING)
            ):
                new_owner = mig.target
        assignments.append(
            Assignment(
                partition=p.partition, owner=None if new_owner is None else WorkerId(new_owner)
            )
        )
    return (
        DeclareDead(
            worker_ids=tuple(WorkerId(w) for w in dead),
            assignments=tuple(assignments),
            now_ms=wall,
        ),
    )


def assign_unassigned(
    settings: PlannerSettings, plans: MovePlans, state: ClusterState, now: int, wall: int
) -> tuple[Command, ...]:
    """Unassigned partitions placed, once min_cluster_size workers are eligible."""
    # `default`'s only: placing a recorded pipeline's partitions (pools, specs on the
    # workers) is not built, so they stay UNASSIGNED.
    unassigned = [
        p.partition
        for p in state.partitions.of(DEFAULT_PIPELINE)
        if p.status is PartitionStatus.UNASSIGNED
    ]
    if not unassigned:
        return ()
    if state.count_in(WorkerState.ACTIVE) < settings.min_cluster_size:
        return ()  # no liveness scan of every worker while too few are registered
    eligible = plans.eligible(state, now)
    if len(eligible) < settings.min_cluster_size:
        return ()
    target = plans.placement(state, eligible, now)
    assignments = tuple(
        Assignment(partition=p, owner=WorkerId(o))
        for p in unassigned
        if (o := target[p]) is not None
    )
    return (AssignPartitions(assignments=assignments, now_ms=wall),) if assignments else ()


def assign_pipelines(
    plans: MovePlans, state: ClusterState, now: int, wall: int
) -> tuple[Command, ...]:
    """Recorded pipelines' unassigned partitions placed in their pools (pools.py), at most
    PIPELINE_ASSIGNMENTS_PER_PASS_MAX of each pipeline per pass."""
    parts = pools.waiting(state)
    if not parts:
        return ()
    target = pools.place(state, plans.eligible(state, now), parts)
    assignments = tuple(Assignment(partition=p, owner=w) for p, w in target.items())
    return (AssignPartitions(assignments=assignments, now_ms=wall),) if assignments else ()


def rebalance_on_join(
    settings: PlannerSettings,
    detector: Detector,
    loads: LoadBook,
    plans: MovePlans,
    state: ClusterState,
    now: int,
    wall: int,
) -> tuple[Command, ...]:
    """Balance moves when the cluster is quiet and rebalance_on_join says so."""
    if not settings.rebalance_on_join or balance_paused(state) or rescaling(state):
        # Maintenance mode or a rescale in flight: no automatic balance (recovery ran
        # before this).
        return ()
    if state.in_flight_migrations() or any(
        p.status is not PartitionStatus.ONLINE for p in state.partitions.of(DEFAULT_PIPELINE)
    ):
        return ()
    if state.count_in(WorkerState.DRAINING) or detector.holds(now):
        return ()  # no balancing while a member is away: it comes back to what it had
    owners = {p.owner for p in state.partitions if p.owner is not None}
    if loads.listening(owners, now):
        return ()  # a new leader: the workers' loads are on their way (load.py)
    moves = plans.balance_moves(state, now)
    if not moves:
        return ()
    return (PlanMigrations(moves=moves, reason=MigrationReason.ADMIN, now_ms=wall),)


def migrations(
    settings: PlannerSettings,
    detector: Detector,
    warmups: WarmUps,
    state: ClusterState,
    now: int,
    wall: int,
) -> tuple[Command, ...]:
    """Abort what lost its target, then start releases within the move throttles
    (`coordinator/core/throttle.py`). With warm hand-offs, PLANNED ones start warming
    within the warm-up bounds and release once warm (or cold, past the deadline); a
    warm-up holds no throttle slot, since its source still serves."""
    in_flight = state.in_flight_migrations()
    waiting = (MigrationPhase.PLANNED, MigrationPhase.WARMING)
    aborts: list[Command] = []
    aborted: set[MigrationId] = set()
    for x in in_flight:
        if x.phase not in (*waiting, MigrationPhase.RELEASING):
            continue
        target = state.workers.get(x.target)
        if target is None or target.state is not WorkerState.ACTIVE:
            aborts.append(
                AbortMigration(
                    migration_id=x.migration_id, note="target is not active", now_ms=wall
                )
            )
            aborted.add(x.migration_id)
    holds = detector.holds(now)
    ready: set[MigrationId] | None = None  # None: every PLANNED or WARMING one
    warms: list[Migration] = []
    if settings.warm.enabled and state.finalized_version >= _WARM_VERSION:
        warming = [x for x in in_flight if x.phase is MigrationPhase.WARMING]
        ready = set(warmups.releasable(warming, now))
        planned = [
            x
            for x in in_flight
            if x.phase is MigrationPhase.PLANNED
            and x.migration_id not in aborted
            and not holds & {x.source, x.target}
        ]
        warms = warmups.starts(planned, warming)
    # Otherwise a WARMING one (a leader with warm moves on planned it) goes on cold:
    # nobody here asks its target how far it is.
    to_start = startable(
        in_flight,
        held=holds,
        cluster_max=settings.max_concurrent_migrations,
        per_worker_max=settings.max_migrations_per_worker,
        ready=ready,
        excluded=aborted,
    )
    starts: list[Command] = [
        *(StartRelease(migration_id=mid, now_ms=wall) for mid in to_start),
        *(StartWarm(migration_id=x.migration_id, now_ms=wall) for x in warms),
    ]
    return (*aborts, *starts)


def drains(plans: MovePlans, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
    """A drain migration that aborted (say its target died) leaves partitions on the
    DRAINING worker: plan them again; a drained worker with nothing in flight leaves."""
    out: list[Command] = []
    for wid in state.workers_in(WorkerState.DRAINING):
        moves = plans.plan_drain(state, wid, now)
        if isinstance(moves, Rejected):
            continue
        # Without moves, DrainWorker only lets a worker that owns nothing and sources
        # nothing in flight leave. One that still owns a partition moving INTO it (a
        # HANDED_OFF migration, done once it hosts) must wait: committing a no-op
        # DrainWorker every batch would starve the host call that finishes it.
        sourcing = any(x.source == wid for x in state.in_flight_migrations())
        owns = bool(state.owned_by(wid))
        if moves or not (sourcing or owns):
            out.append(DrainWorker(worker_id=wid, moves=moves, now_ms=wall))
    return tuple(out)
