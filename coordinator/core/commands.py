"""Commands (the replicated log's entries) and their results.

Owns the command vocabulary. Each command class has a fixed numeric ``TAG`` that is part of
the wire format: a tag is never reused or renumbered, a retired command keeps its number.
Everything ``apply`` needs (timestamps, ids) is stamped into the command by the proposer, so
applying a command reads no clock and no randomness and every replica reaches the same state.
Results are values, never exceptions: the replicated apply must not raise. Each command
class names the type its Ok result carries (``RegisterWorker(Returns[RegisterResult])``), so
a proposer gets back the result of the command it proposed; the codec writes every result
type as the plain map it stands for. A refusal is a ``Rejected`` with a ``RejectCode``: the
core speaks no transport, and the HTTP edge maps the code's kind to a status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic, Literal, TypeVar, cast, get_args, get_origin

from coordinator.core.model import (
    Epoch,
    Label,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionId,
    PipelineName,
    PipelineSettings,
    PipelineState,
    RescalePhase,
    TokenRole,
    WorkerId,
    WorkerState,
)

# --- helper records carried inside commands ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    partition: PartitionId
    # None leaves the partition UNASSIGNED (allowed only in DeclareDead).
    owner: WorkerId | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    partition: PartitionId
    source: WorkerId
    target: WorkerId


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointReport:
    # What a worker says it holds: not an id or an epoch until apply checks them against the
    # state (it fences a report of any other).
    partition: int
    epoch: int
    offset: int
    uri: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalCheckpoint:
    offset: int
    uri: str
    epoch: Epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltCheckpoint:
    """A new partition's starting checkpoint, as the rescale's build wrote it (StatesBuilt)."""

    partition: int
    offset: int
    uri: str


# --- results -----------------------------------------------------------------------------------
# What an Ok carries, one type per command, fields in the order of their wire form (codec.py).
# Sequences are tuples, so a result decoded from a snapshot equals the one recorded.


@dataclass(frozen=True, slots=True, kw_only=True)
class NewMigration:
    """A migration a command created (PlanMigrations, DrainWorker)."""

    id: MigrationId
    partition: int
    source: WorkerId
    target: WorkerId


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointVerdict:
    partition: int
    status: Literal["accepted", "fenced"]
    reason: str | None  # why it was fenced; None when accepted


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapResult:
    total_partitions: int
    created: bool  # False: bootstrapped already, with this many partitions


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterResult:
    worker_id: WorkerId
    incarnation: int
    rehosted: tuple[int, ...]  # the partitions it owned, each under a new epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclareDeadResult:
    dead: tuple[WorkerId, ...]
    reassigned: int
    handed_off: tuple[MigrationId, ...]
    aborted: tuple[MigrationId, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignResult:
    assigned: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OnlineResult:
    partition: int
    epoch: int
    changed: bool
    migration_done: MigrationId | None
    left: WorkerId | None  # the migration's source, when it left with its last partition


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    migrations: tuple[NewMigration, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseResult:
    migration_id: MigrationId
    phase: MigrationPhase
    changed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class HandOffResult:
    migration_id: MigrationId
    partition: int
    owner: WorkerId | None
    epoch: int
    # The checkpoint the new owner resumes from; None when it was handed off already.
    checkpoint: Literal["final", "last_accepted"] | None
    changed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortResult:
    migration_id: MigrationId
    phase: MigrationPhase
    rehosted: bool  # the source reopened the partition under a new epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointsResult:
    results: tuple[CheckpointVerdict, ...]  # one per entry, in order


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainResult:
    worker_id: WorkerId
    state: WorkerState
    migrations: tuple[NewMigration, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BarrierResult:
    nonce: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FallBackResult:
    partition: int
    epoch: int
    offset: int | None  # the checkpoint it resumes from; None for a full replay
    earlier_left: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckResult:
    partition: int
    stuck: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetResult:
    partition: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportResult:
    node_id: str
    finalized_version: int  # the cluster's, after the report


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalizeResult:
    finalized_version: int
    changed: bool  # False: it was finalized at that version already


@dataclass(frozen=True, slots=True, kw_only=True)
class BackupResult:
    applied_index: int
    latest: bool  # it is now the last backup (False: a newer one was recorded before)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetireResult:
    # Counts, not ids: results stay in the request table, which must not grow with a batch.
    retired: int
    kept: int  # named but not retirable when applied (came back, too recent, still named)
    incarnation_floor: int  # the state's, after the command


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceResult:
    maintenance: bool  # whether maintenance mode is on after the command
    changed: bool  # False: the command found it as it asked (or ended another one)


@dataclass(frozen=True, slots=True, kw_only=True)
class RescaleResult:
    """Where a rescale is after the command (StartRescale, StatesBuilt, FinishRescale)."""

    generation: int
    partitions: int
    previous: int
    phase: RescalePhase


@dataclass(frozen=True, slots=True, kw_only=True)
class CutResult:
    partition: int
    status: Literal["accepted", "fenced"]  # fenced: not at the partition's current epoch
    phase: RescalePhase  # the rescale's, after the command


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileResult:
    worker_id: WorkerId
    incarnation: int
    changed: bool  # False: the worker had this profile already


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineResult:
    """Where a pipeline is after one of its commands (CreatePipeline .. ForgetPipeline)."""

    name: PipelineName
    incarnation: int
    state: PipelineState | None  # None: gone (ForgetPipeline)
    spec_version: int
    changed: bool  # False: the command found it as it asked


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenResult:
    """A pipeline's token after IssueToken or RevokeToken."""

    name: PipelineName
    token_id: str
    issued: bool  # True: the token is recorded now; False: it is not (revoked, or never was)
    changed: bool


CommandResult = (
    BootstrapResult
    | RegisterResult
    | DeclareDeadResult
    | AssignResult
    | OnlineResult
    | PlanResult
    | ReleaseResult
    | HandOffResult
    | AbortResult
    | CheckpointsResult
    | DrainResult
    | BarrierResult
    | FallBackResult
    | StuckResult
    | ResetResult
    | ReportResult
    | FinalizeResult
    | BackupResult
    | RetireResult
    | MaintenanceResult
    | RescaleResult
    | CutResult
    | PipelineResult
    | ProfileResult
    | TokenResult
)

R = TypeVar("R", bound=CommandResult)
# Covariant, so a union of commands is a Returns of the union of their results.
R_co = TypeVar("R_co", bound=CommandResult, covariant=True)


class Returns(Generic[R_co]):
    """The base of every command: ``R_co`` is the type its Ok result carries."""

    __slots__ = ()
    TAG: ClassVar[int]


# --- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap(Returns[BootstrapResult]):
    TAG: ClassVar[int] = 1
    total_partitions: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterWorker(Returns[RegisterResult]):
    TAG: ClassVar[int] = 2
    worker_id: WorkerId
    address: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclareDead(Returns[DeclareDeadResult]):
    TAG: ClassVar[int] = 3
    worker_ids: tuple[WorkerId, ...]
    assignments: tuple[Assignment, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignPartitions(Returns[AssignResult]):
    TAG: ClassVar[int] = 4
    assignments: tuple[Assignment, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOnline(Returns[OnlineResult]):
    TAG: ClassVar[int] = 5
    partition: PartitionId
    epoch: Epoch
    owner: WorkerId
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanMigrations(Returns[PlanResult]):
    TAG: ClassVar[int] = 6
    moves: tuple[Move, ...]
    reason: MigrationReason
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRelease(Returns[ReleaseResult]):
    TAG: ClassVar[int] = 7
    migration_id: MigrationId
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartWarm(Returns[ReleaseResult]):
    """A PLANNED migration's target may warm up: load the partition's checkpoint and follow
    its source log while the source still serves it (read-only: the target holds no epoch).
    StartRelease follows once the target is warm or its warm-up deadline passes.
    Command-set version 3."""

    TAG: ClassVar[int] = 23
    migration_id: MigrationId
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HandOff(Returns[HandOffResult]):
    TAG: ClassVar[int] = 8
    migration_id: MigrationId
    # None when the source could not produce one (dead, timed out): keep the last accepted.
    checkpoint: FinalCheckpoint | None
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortMigration(Returns[AbortResult]):
    TAG: ClassVar[int] = 9
    migration_id: MigrationId
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordCheckpoints(Returns[CheckpointsResult]):
    TAG: ClassVar[int] = 10
    worker_id: WorkerId
    incarnation: int
    entries: tuple[CheckpointReport, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainWorker(Returns[DrainResult]):
    TAG: ClassVar[int] = 11
    worker_id: WorkerId
    moves: tuple[Move, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Barrier(Returns[BarrierResult]):
    TAG: ClassVar[int] = 12
    nonce: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FallBack(Returns[FallBackResult]):
    """Host the ASSIGNING partition again, under a new epoch, from one of its earlier accepted
    checkpoints (``checkpoint``) or, with None, from offset 0 (a full replay)."""

    TAG: ClassVar[int] = 13
    partition: PartitionId
    # The epoch whose host call kept failing: a fallback planned against an older one is stale.
    epoch: Epoch
    checkpoint: FinalCheckpoint | None
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkStuck(Returns[StuckResult]):
    """No lossless fallback is left: say so on the partition until an operator resets it."""

    TAG: ClassVar[int] = 14
    partition: PartitionId
    epoch: Epoch
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetPartition(Returns[ResetResult]):
    """Operator: forget the partition's checkpoints and host it from offset 0 (new epoch)."""

    TAG: ClassVar[int] = 15
    partition: PartitionId
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportVersions(Returns[ReportResult]):
    """A coordinator node says which command-set versions it speaks and which release it runs
    (proposed by the node itself whenever its record in the state is missing or differs)."""

    TAG: ClassVar[int] = 16
    node_id: str
    min_version: int
    max_version: int
    package_version: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalizeVersion(Returns[FinalizeResult]):
    """The leader raises the cluster's finalized command-set version: every one of `voters`
    (the voter set when it was proposed) speaks it. Never lowers it."""

    TAG: ClassVar[int] = 17
    version: int
    voters: tuple[str, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordBackup(Returns[BackupResult]):
    """An operator's tool stored a backup (`ripple backup`): the state keeps the newest one,
    so `ripple status` and a metric can say how old it is. Command-set version 2."""

    TAG: ClassVar[int] = 18
    cluster_id: str
    applied_index: int
    term: int
    sha256: str
    size_bytes: int
    created_at_ms: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetireWorkers(Returns[RetireResult]):
    """The leader forgets departed workers (coordinator/core/retirement.py): each of
    `worker_ids` still DEAD or LEFT since at most `departed_by_ms` and named by no in-flight
    migration leaves the state, its incarnation kept in the state's incarnation floor.
    Command-set version 3."""

    TAG: ClassVar[int] = 21
    worker_ids: tuple[WorkerId, ...]
    # Only workers whose departure was stamped at or before this are retired: the leader's
    # clock less the retention window, carried here so every replica decides alike.
    departed_by_ms: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceOn(Returns[MaintenanceResult]):
    """An operator turns maintenance mode on (or replaces the one that is on): the leader
    proposes no automatic balance move until it ends; failure recovery goes on
    (`coordinator/core/maintenance.py`). `until_ms` (wall) is when it ends by itself, None
    for never. Command-set version 3."""

    TAG: ClassVar[int] = 19
    by: str
    reason: str
    until_ms: int | None
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceOff(Returns[MaintenanceResult]):
    """Maintenance mode ends: an operator's, or the leader's once its time is up. With
    `since_ms` it ends only the maintenance that began then, so an expiry planned against
    one that an operator has since replaced ends nothing. Command-set version 3."""

    TAG: ClassVar[int] = 20
    by: str
    reason: str
    since_ms: int | None
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRescale(Returns[RescaleResult]):
    """An operator changes the partition count to `partitions`: a new routing generation
    whose rescale starts CUTTING (coordinator/core/rescale.py). Command-set version 4."""

    TAG: ClassVar[int] = 24
    partitions: int
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordCut(Returns[CutResult]):
    """The owner of old partition `partition` at `epoch` wrote its checkpoint at exactly its
    cut `offset` (the seal's): recorded as the cut and as the partition's checkpoint. The
    last one ends CUTTING. Command-set version 4."""

    TAG: ClassVar[int] = 25
    # A worker's report, not an id or an epoch until apply checks them against the state.
    partition: int
    epoch: int
    offset: int
    uri: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StatesBuilt(Returns[RescaleResult]):
    """The state move wrote one starting checkpoint per new partition: the partition table
    becomes the new generation's (every partition UNASSIGNED). Command-set version 4."""

    TAG: ClassVar[int] = 26
    generation: int
    checkpoints: tuple[BuiltCheckpoint, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishRescale(Returns[RescaleResult]):
    """Every new partition is ONLINE: the rescale is DONE. Command-set version 4."""

    TAG: ClassVar[int] = 27
    generation: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePipeline(Returns[PipelineResult]):
    """An operator creates pipeline `name` from a spec the proposer has parsed and checked
    (`shared/spec/`): recorded CREATING, the create's commit point
    (coordinator/core/pipeline_commands.py). Command-set version 5."""

    TAG: ClassVar[int] = 28
    name: PipelineName
    spec_text: str
    spec_sha256: str  # hex sha256 of spec_text's UTF-8 bytes: apply checks it
    partitions: int
    pool: tuple[Label, ...]
    settings: PipelineSettings
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivatePipeline(Returns[PipelineResult]):
    """The leader has set up incarnation `incarnation` of pipeline `name`: CREATING ->
    ACTIVE. Command-set version 5."""

    TAG: ClassVar[int] = 29
    name: PipelineName
    incarnation: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PausePipeline(Returns[PipelineResult]):
    """An operator pauses a pipeline: ACTIVE -> PAUSED. Command-set version 5."""

    TAG: ClassVar[int] = 30
    name: PipelineName
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumePipeline(Returns[PipelineResult]):
    """An operator resumes a paused pipeline: PAUSED -> ACTIVE. Command-set version 5."""

    TAG: ClassVar[int] = 31
    name: PipelineName
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DropPipeline(Returns[PipelineResult]):
    """An operator drops a pipeline (with `purge`, its objects in the store too): ->
    DROPPING, the drop's commit point. Command-set version 5."""

    TAG: ClassVar[int] = 32
    name: PipelineName
    purge: bool
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetPipeline(Returns[PipelineResult]):
    """The leader has torn down incarnation `incarnation` of pipeline `name`: its record
    leaves the state. Command-set version 5."""

    TAG: ClassVar[int] = 33
    name: PipelineName
    incarnation: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileWorker(Returns[ProfileResult]):
    """Incarnation `incarnation` of a registered worker runs recorded pipelines: its labels
    (what pools select on) and its slots (the most partitions of recorded pipelines it
    takes). Proposed by the leader right after the worker's RegisterWorker when it declared
    them; a worker without a profile is given `default`'s partitions only. Command-set
    version 5."""

    TAG: ClassVar[int] = 34
    worker_id: WorkerId
    incarnation: int
    labels: tuple[Label, ...]
    slots: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class IssueToken(Returns[TokenResult]):
    """An admin issues a token scoped to pipeline `name`: its id, role and the sha256 of its
    secret (the secret itself never enters the log). Command-set version 6."""

    TAG: ClassVar[int] = 35
    name: PipelineName
    token_id: str
    role: TokenRole
    sha256: str
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RevokeToken(Returns[TokenResult]):
    """An admin revokes token `token_id` of pipeline `name`: it stops working on every node
    once applied. Command-set version 6."""

    TAG: ClassVar[int] = 36
    name: PipelineName
    token_id: str
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartPipelineRescale(Returns[RescaleResult]):
    """An operator rescales incarnation `incarnation` of recorded pipeline `name` to
    `partitions`, or updates its spec (`spec_text` "" keeps it), or both: a new routing
    generation on fresh partition numbers, reserved now, whose rescale starts CUTTING
    (coordinator/core/pipeline_rescale.py). Command-set version 7."""

    TAG: ClassVar[int] = 38
    name: PipelineName
    incarnation: int
    partitions: int
    spec_text: str
    spec_sha256: str  # hex sha256 of spec_text's UTF-8 bytes ("" with no text): apply checks it
    by: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordPipelineCut(Returns[CutResult]):
    """The owner of the pipeline's old partition number `partition` at `epoch` wrote its
    checkpoint at exactly its cut `offset`: as RecordCut, for one recorded pipeline.
    Command-set version 7."""

    TAG: ClassVar[int] = 39
    name: PipelineName
    incarnation: int
    # A worker's report, not an id or an epoch until apply checks them against the state.
    partition: int
    epoch: int
    offset: int
    uri: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineStatesBuilt(Returns[RescaleResult]):
    """The state move wrote one starting checkpoint per reserved number (each
    `BuiltCheckpoint.partition` is a number, not an index): the pipeline's partitions become
    the new generation's, every one UNASSIGNED. Command-set version 7."""

    TAG: ClassVar[int] = 40
    name: PipelineName
    incarnation: int
    generation: int
    checkpoints: tuple[BuiltCheckpoint, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishPipelineRescale(Returns[RescaleResult]):
    """Every partition of the pipeline's new generation is ONLINE: its rescale is DONE.
    Command-set version 7."""

    TAG: ClassVar[int] = 41
    name: PipelineName
    incarnation: int
    generation: int
    now_ms: int


Command = (
    Bootstrap
    | RegisterWorker
    | DeclareDead
    | AssignPartitions
    | PartitionOnline
    | PlanMigrations
    | StartRelease
    | HandOff
    | AbortMigration
    | RecordCheckpoints
    | DrainWorker
    | Barrier
    | FallBack
    | MarkStuck
    | ResetPartition
    | ReportVersions
    | FinalizeVersion
    | RecordBackup
    | MaintenanceOn
    | MaintenanceOff
    | RetireWorkers
    | StartWarm
    | StartRescale
    | RecordCut
    | StatesBuilt
    | FinishRescale
    | CreatePipeline
    | ActivatePipeline
    | PausePipeline
    | ResumePipeline
    | DropPipeline
    | ForgetPipeline
    | ProfileWorker
    | IssueToken
    | RevokeToken
    | StartPipelineRescale
    | RecordPipelineCut
    | PipelineStatesBuilt
    | FinishPipelineRescale
)

COMMAND_TYPES: tuple[type[Command], ...] = (
    Bootstrap,
    RegisterWorker,
    DeclareDead,
    AssignPartitions,
    PartitionOnline,
    PlanMigrations,
    StartRelease,
    HandOff,
    AbortMigration,
    RecordCheckpoints,
    DrainWorker,
    Barrier,
    FallBack,
    MarkStuck,
    ResetPartition,
    ReportVersions,
    FinalizeVersion,
    RecordBackup,
    MaintenanceOn,
    MaintenanceOff,
    RetireWorkers,
    StartWarm,
    StartRescale,
    RecordCut,
    StatesBuilt,
    FinishRescale,
    CreatePipeline,
    ActivatePipeline,
    PausePipeline,
    ResumePipeline,
    DropPipeline,
    ForgetPipeline,
    ProfileWorker,
    IssueToken,
    RevokeToken,
    StartPipelineRescale,
    RecordPipelineCut,
    PipelineStatesBuilt,
    FinishPipelineRescale,
)
COMMAND_BY_TAG: dict[int, type[Command]] = {cls.TAG: cls for cls in COMMAND_TYPES}
assert len(COMMAND_BY_TAG) == len(COMMAND_TYPES), "command tags must be unique"


def _returned(cls: type[Command]) -> type[CommandResult]:
    """The argument of the class's ``Returns[...]`` base: where a command names its result."""
    (base,) = [b for b in cls.__dict__["__orig_bases__"] if get_origin(b) is Returns]
    (returned,) = get_args(base)
    return cast(type[CommandResult], returned)


_RESULT_TYPE_OF: dict[type[Command], type[CommandResult]] = {
    cls: _returned(cls) for cls in COMMAND_TYPES
}


def result_type(command: Returns[R]) -> type[R]:
    """The type an Ok result of ``command`` carries (its class's ``Returns[...]``)."""
    return cast(type[R], _RESULT_TYPE_OF[cast(type[Command], type(command))])


# --- outcomes ----------------------------------------------------------------------------------

# What the state machine refuses with: a closed vocabulary of codes and no transport. Each is
# one of shared.errors.ErrorCode (whose kind says whose fault it is); the HTTP edge alone turns
# a kind into a status (shared/http_statuses.py, which the core may not import).
RejectCode = Literal[
    "invalid",  # a field of the command is wrong (Rejected.field names it)
    "not_found",  # the worker, partition or migration named does not exist
    "conflict",  # the state does not allow the command now
    "stale_epoch",  # an epoch older than the partition's
    "fenced",  # a checkpoint of an epoch that no longer owns its partition
    "not_bootstrapped",  # the cluster has no partitions yet
    # The command's command-set version is above the cluster's finalized one: every voter
    # speaks it and the leader finalizes it shortly (coordinator/core/versions.py).
    "version_not_finalized",
    # Some voter does not speak the command's command-set version (it runs an older release).
    "version_unsupported",
    # This node has stopped applying entries (an entry of a command set it does not speak).
    "halted",
    # A rescale (coordinator/core/rescale.py, pipeline_rescale.py): one is not DONE yet; the
    # count (and spec) asked for is the current one; Finish* before every new partition is
    # ONLINE.
    "rescale_in_flight",
    "same_partition_count",
    "not_online",
    # A full replay (a fallback's last step, an operator's reset) of a partition of a
    # rescaled table: its state starts at its build, not at offset 0.
    "rescaled",
    "internal",  # a bug inside apply, caught so that every node answers the same
]
REJECT_CODES: frozenset[str] = frozenset(get_args(RejectCode))


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok:
    """The command applied; ``value`` is its result (of the command's ``Returns`` type)."""

    value: CommandResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """The command changed nothing; ``code`` says why to a program, ``message`` to a person."""

    code: RejectCode
    message: str
    field: str | None = None


Result = Ok | Rejected


def rejected(code: RejectCode, message: str, field: str | None = None) -> Rejected:
    return Rejected(code=code, message=message, field=field)
