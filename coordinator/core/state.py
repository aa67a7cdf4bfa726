"""The one function that changes the replicated cluster state: ``apply``, and its dispatch.

Every change to the replicated state is decided by one handler per command, dispatched
here: the workers' commands in `coordinator/core/worker_commands.py`, the partitions' in
`partition_commands.py`, a migration's steps in `migration_commands.py` (the changes and
checks they share in `edits.py`), the cluster's records about itself in `bookkeeping.py`,
maintenance mode in `maintenance.py`, the retirement of departed workers in
`retirement.py`, a rescale's steps in `rescale.py`, a pipeline's lifecycle in
`pipeline_commands.py` and its rescale's steps in `pipeline_rescale.py`. The container they change,
``ClusterState`` (`coordinator/core/cluster.py`, re-exported here as ``apply``'s argument
type), only keeps its indices true. ``apply`` is deterministic (no clock, no randomness:
both are stamped into commands) and total: every input yields a Result value. Each
handler validates completely before its first mutation, so a Rejected never changes the
state; that includes asking the lifecycle tables
(`coordinator/core/lifecycle.py`) about every worker, partition and migration change it is
about to make. Invariants kept (`coordinator/core/invariants.py` checks them in the property
tests and the simulation):

- a partition has at most one owner; an owner exists and is ACTIVE or DRAINING;
- a partition's epoch never decreases and grows by one with every (re)assignment; a
  rescale's new partition table starts above every epoch of the old one;
- ``partition.migration`` names a non-terminal migration of that partition; a PLANNED or
  RELEASING migration's partition is owned by its source, a HANDED_OFF one's by its target;
- ``generation`` grows by exactly one per command that changes some (owner, epoch) pair.
"""

from __future__ import annotations

from coordinator.core import (
    bookkeeping,
    maintenance,
    migration_commands,
    partition_commands,
    pipeline_commands,
    pipeline_rescale,
    rescale,
    retirement,
    worker_commands,
)
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    AbortMigration,
    ActivatePipeline,
    AssignPartitions,
    Barrier,
    BarrierResult,
    Bootstrap,
    Command,
    CreatePipeline,
    DeclareDead,
    DrainWorker,
    DropPipeline,
    FallBack,
    FinalizeVersion,
    FinishPipelineRescale,
    FinishRescale,
    ForgetPipeline,
    HandOff,
    IssueToken,
    MaintenanceOff,
    MaintenanceOn,
    MarkStuck,
    Ok,
    PartitionOnline,
    PausePipeline,
    PipelineStatesBuilt,
    PlanMigrations,
    ProfileWorker,
    RecordBackup,
    RecordCheckpoints,
    RecordCut,
    RecordPipelineCut,
    RegisterWorker,
    ReportVersions,
    ResetPartition,
    Result,
    ResumePipeline,
    RetireWorkers,
    RevokeToken,
    StartPipelineRescale,
    StartRelease,
    StartRescale,
    StartWarm,
    StatesBuilt,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    REQUESTS_RETAINED_MAX,
    TERMINAL_MIGRATIONS_RETAINED_MAX,
)
from coordinator.core.versions import version_of

__all__ = ["ClusterState", "apply"]


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
    version = version_of(cmd)
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


def _dispatch(state: ClusterState, cmd: Command) -> Outcome:
    if isinstance(cmd, Bootstrap):
        return partition_commands.bootstrap(state, cmd)
    # The cluster's records about itself need no partition table: a node reports its
    # versions as soon as it starts, before the first leader has bootstrapped.
    if isinstance(cmd, ReportVersions):
        return bookkeeping.report_versions(state, cmd), False
    if isinstance(cmd, FinalizeVersion):
        return bookkeeping.finalize_version(state, cmd), False
    if isinstance(cmd, RecordBackup):
        return bookkeeping.record_backup(state, cmd), False
    if isinstance(cmd, MaintenanceOn):
        return maintenance.maintenance_on(state, cmd), False
    if isinstance(cmd, MaintenanceOff):
        return maintenance.maintenance_off(state, cmd), False
    if state.total_partitions == 0:
        return rejected("not_bootstrapped", "the cluster is not bootstrapped yet"), False
    match cmd:
        case RegisterWorker():
            return worker_commands.register_worker(state, cmd)
        case DeclareDead():
            return worker_commands.declare_dead(state, cmd)
        case AssignPartitions():
            return partition_commands.assign_partitions(state, cmd)
        case PartitionOnline():
            return partition_commands.partition_online(state, cmd)
        case PlanMigrations():
            return migration_commands.plan_migrations(state, cmd)
        case StartRelease():
            return migration_commands.start_release(state, cmd)
        case StartWarm():
            return migration_commands.start_warm(state, cmd)
        case HandOff():
            return migration_commands.hand_off(state, cmd)
        case AbortMigration():
            return migration_commands.abort_migration(state, cmd)
        case RecordCheckpoints():
            return partition_commands.record_checkpoints(state, cmd)
        case DrainWorker():
            return worker_commands.drain_worker(state, cmd)
        case FallBack():
            return partition_commands.fall_back(state, cmd)
        case MarkStuck():
            return partition_commands.mark_stuck(state, cmd)
        case ResetPartition():
            return partition_commands.reset_partition(state, cmd)
        case RetireWorkers():
            return retirement.retire(state, cmd), False
        case StartRescale():
            return rescale.start_rescale(state, cmd), False
        case RecordCut():
            return rescale.record_cut(state, cmd), False
        case StatesBuilt():
            return rescale.states_built(state, cmd)
        case FinishRescale():
            return rescale.finish_rescale(state, cmd), False
        case CreatePipeline():
            return pipeline_commands.create_pipeline(state, cmd), False
        case ActivatePipeline():
            return pipeline_commands.activate_pipeline(state, cmd), False
        case PausePipeline():
            return pipeline_commands.pause_pipeline(state, cmd), False
        case ResumePipeline():
            return pipeline_commands.resume_pipeline(state, cmd), False
        case DropPipeline():
            return pipeline_commands.drop_pipeline(state, cmd), False
        case ForgetPipeline():
            return pipeline_commands.forget_pipeline(state, cmd)
        case ProfileWorker():
            return worker_commands.profile_worker(state, cmd)
        case IssueToken():
            return pipeline_commands.issue_token(state, cmd), False
        case RevokeToken():
            return pipeline_commands.revoke_token(state, cmd), False
        case StartPipelineRescale():
            return pipeline_rescale.start_pipeline_rescale(state, cmd), False
        case RecordPipelineCut():
            return pipeline_rescale.record_pipeline_cut(state, cmd), False
        case PipelineStatesBuilt():
            return pipeline_rescale.pipeline_states_built(state, cmd)
        case FinishPipelineRescale():
            return pipeline_rescale.finish_pipeline_rescale(state, cmd), False
        case Barrier():  # handled before dispatch; kept so the match is exhaustive
            return Ok(value=BarrierResult(nonce=cmd.nonce)), False
        case ReportVersions() | FinalizeVersion() | RecordBackup():  # dispatched above
            return rejected("internal", "dispatched before the partition table"), False
        case MaintenanceOn() | MaintenanceOff():  # dispatched above
            return rejected("internal", "dispatched before the partition table"), False
