"""Request and response bodies of the coordinator's HTTP API, declared once.

These pydantic models are the single source of the wire shapes: handlers validate
requests with them (so a validation error names the offending field) and the OpenAPI
document at `GET /v1/openapi.json` is generated from them. Requests are strict (a bool is
not an int, unknown fields are refused) and every list or map has a named bound.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from coordinator.core.model import NOTE_LEN_MAX, MigrationPhase
from coordinator.service.rescale_models import RescaleView

# The worker session's messages are declared in shared (both ends use them); re-exported
# here, so this module stays the whole vocabulary the OpenAPI document is built from.
from shared.messages.session import (
    ADDRESS_LEN_MAX as ADDRESS_LEN_MAX,
)
from shared.messages.session import (
    ADDRESS_PATTERN as ADDRESS_PATTERN,
)
from shared.messages.session import (
    BATCH_ERROR_LEN_MAX as BATCH_ERROR_LEN_MAX,
)
from shared.messages.session import (
    CHECKPOINT_ENTRIES_MAX as CHECKPOINT_ENTRIES_MAX,
)
from shared.messages.session import (
    ID_REGEX as ID_REGEX,
)
from shared.messages.session import (
    URI_LEN_MAX as URI_LEN_MAX,
)
from shared.messages.session import (
    WORKER_SLOTS_DEFAULT as WORKER_SLOTS_DEFAULT,
)
from shared.messages.session import (
    AssignmentEntry as AssignmentEntry,
)
from shared.messages.session import (
    CheckpointEntry as CheckpointEntry,
)
from shared.messages.session import (
    CheckpointResult as CheckpointResult,
)
from shared.messages.session import (
    CheckpointsRequest as CheckpointsRequest,
)
from shared.messages.session import (
    CheckpointsResponse as CheckpointsResponse,
)
from shared.messages.session import (
    HeartbeatRequest as HeartbeatRequest,
)
from shared.messages.session import (
    HeartbeatResponse as HeartbeatResponse,
)
from shared.messages.session import (
    Id as Id,
)
from shared.messages.session import (
    NonNeg as NonNeg,
)
from shared.messages.session import (
    PartitionReport as PartitionReport,
)
from shared.messages.session import (
    Positive as Positive,
)
from shared.messages.session import (
    RegisterRequest as RegisterRequest,
)
from shared.messages.session import (
    RegisterResponse as RegisterResponse,
)
from shared.messages.session import (
    Request as _Request,
)
from shared.messages.session import (
    Response as _Response,
)
from shared.messages.session import (
    RestartingRequest as RestartingRequest,
)
from shared.messages.session import (
    RestartingResponse as RestartingResponse,
)

MOVES_MAX = 10_000


class ErrorBody(_Response):
    error: str
    message: str
    field: str | None = None


class WorkerView(_Response):
    worker_id: str
    address: str
    incarnation: int
    state: str
    registered_at_ms: int
    partitions: int
    liveness: str | None = None  # leader only: alive | suspected | dead | restarting
    load: float | None = None
    failing_partitions: int | None = None  # leader only: owned partitions whose batches fail
    # Leader only: records its partitions have not processed yet, summed over those whose
    # last heartbeat said where the source log ends.
    lag_records: int | None = None
    # Leader only: the summed input rate of its partitions (records per second), when every
    # one of them has a fresh rate (load_stale_s); else null and its load is its count.
    rate_per_s: float | None = None
    # Its profile (ProfileWorker): labels pools select on, and slots for recorded pipelines'
    # partitions; null when it runs `default`'s partitions only.
    labels: dict[str, str] | None = None
    slots: int | None = None


class WorkersResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    workers: list[WorkerView]


class AssignmentResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    worker_id: str
    assignment: list[AssignmentEntry]


class DrainResponse(_Response):
    worker_id: str
    state: str
    migrations: list[MigrationRef]


# -- partitions and migrations ------------------------------------------------------------


class CheckpointView(_Response):
    offset: int
    uri: str
    epoch: int
    at_ms: int


class FailingView(_Response):
    failures: int  # micro-batches in a row that failed on the owner
    error: str


class PartitionView(_Response):
    partition: int  # the pipeline's own number, 0 .. its partitions - 1
    pipeline: str = "default"  # whose partition it is (the routes' ?pipeline=)
    owner: str | None
    epoch: int
    status: str
    checkpoint: CheckpointView | None
    migration: str | None = None
    failing: FailingView | None = None  # leader only: the owner reports failing batches
    # Leader only, from the owner's last heartbeat: the next source offset it will process,
    # and how many records the source log holds past it (null until the owner says).
    offset: int | None = None
    lag_records: int | None = None
    # Leader only: records per second arriving, as the owner last reported it within
    # load_stale_s (what load-aware placement weighs); null when stale or never reported.
    rate_per_s: float | None = None
    # Why the partition cannot come online without an operator (no lossless fallback left:
    # POST /v1/admin/partitions/{p}/reset); null when it is not stuck.
    stuck: str | None = None


class PartitionsResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    partitions: list[PartitionView]


class PartitionResponse(PartitionView):
    generation: int
    applied_index: int
    stale: bool


class HistoryEntry(_Response):
    epoch: int
    owner: str | None
    reason: str
    at_ms: int
    # What happened, in words, when the reason alone does not say (a fallback's failure and
    # what it fell back to); absent otherwise.
    note: str | None = None


class HistoryResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    partition: int
    pipeline: str = "default"
    history: list[HistoryEntry]


# A migration's phase as the API names it (docs/design.md §4 has the lifecycle).
Phase = Annotated[str, Field(description=" | ".join(p.value for p in MigrationPhase))]


class MigrationView(_Response):
    id: str
    partition: int  # the pipeline's own number, as PartitionView's
    pipeline: str = "default"
    source: str
    target: str
    phase: Phase
    reason: str
    created_at_ms: int
    updated_at_ms: int
    note: str = ""


class MigrationsResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    in_flight: int
    migrations: list[MigrationView]


class MigrationRef(_Response):
    id: str | None
    partition: int  # the pipeline's own number when the request named one (?pipeline=)
    from_: str = Field(serialization_alias="from")
    to: str


class MoveRequest(_Request):
    partition: NonNeg
    to: Id


class ReassignRequest(_Request):
    # Exactly one of strategy and moves (the handler refuses both or neither); said in the
    # schema too, so generated clients and schemathesis know it.
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["strategy"], "properties": {"strategy": {"const": "balance"}}},
                {"required": ["moves"], "properties": {"moves": {"type": "array"}}},
            ]
        },
    )
    strategy: Literal["balance"] | None = None
    moves: Annotated[list[MoveRequest], Field(max_length=MOVES_MAX)] | None = None
    dry_run: bool = False


class ReassignResponse(_Response):
    dry_run: bool
    migrations: list[MigrationRef]


class AbortResponse(_Response):
    id: str
    phase: Phase


# The longest `ripple maintenance on --for`: a maintenance meant to last longer is turned off
# by hand (a forgotten one would otherwise pause balancing for months).
MAINTENANCE_FOR_S_MAX = 7 * 86400


class MaintenanceOnRequest(_Request):
    """Turn maintenance mode on, why, and (`for_s`) for how long; absent: until turned off."""

    reason: Annotated[str, Field(min_length=1, max_length=NOTE_LEN_MAX)]
    for_s: Annotated[float, Field(ge=1, le=MAINTENANCE_FOR_S_MAX)] | None = None


class MaintenanceOffRequest(_Request):
    reason: Annotated[str, Field(min_length=1, max_length=NOTE_LEN_MAX)] | None = None


class MaintenanceView(_Response):
    """Maintenance mode as the replicated state records it (wall times, ms since the epoch;
    `until_ms` None: until turned off)."""

    by: str
    reason: str
    since_ms: int
    until_ms: int | None


class MaintenanceResponse(_Response):
    maintenance: MaintenanceView | None  # None: off
    changed: bool  # false: it already was as asked


class ResetResponse(_Response):
    partition: int
    pipeline: str = "default"
    epoch: int  # the new epoch: the owner hosts it from offset 0


class RecordBackupRequest(_Request):
    """A backup an operator's tool stored, as its header says (`ripple backup` sends it)."""

    cluster_id: Id
    applied_index: NonNeg
    term: NonNeg
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    size_bytes: NonNeg
    created_at_ms: NonNeg


class RecordBackupResponse(_Response):
    applied_index: int
    latest: bool  # it is now the last backup (false: one of a higher index was recorded)


# -- cluster -------------------------------------------------------------------------------


class ClusterSummary(_Response):
    active_workers: int
    total_workers: int
    total_partitions: int  # the current routing generation's count
    generation: int
    # The partition count of every routing generation (index = generation, the current one
    # last) and the current one's number (docs/pipeline.md "Rescaling").
    routing: list[int]
    routing_generation: int


class NodeRef(_Response):
    id: str
    url: str


class VersionRangeView(_Response):
    min_version: int
    max_version: int


class HealthResponse(_Response):
    node_id: str
    role: Literal["leader", "follower", "candidate"]
    ready: bool
    leader_id: str | None
    leader_url: str | None
    term: int
    commit_index: int
    applied_index: int
    cluster: ClusterSummary
    # On the leader: whether its duty loop (assignment, failover, migrations) is running.
    # False on a leader means nothing is being driven: alert on it. None elsewhere.
    duties_running: bool | None = None
    # sha256 of the whole replicated state (`?digest=true` only): equal on every node at
    # one applied_index, or the replicas diverged.
    state_digest: str | None = None
    # Every voter (as this node's log says), so a client (the dashboard) can reach the others.
    nodes: list[NodeRef] = []
    # This node's release, the command-set versions it speaks, and the cluster's finalized
    # command-set version as this node's state has it (docs/design.md §10).
    package_version: str
    # The cluster this node's data directory belongs to (its cluster.id): a restored or
    # recovered cluster has a new one.
    cluster_id: str
    command_set: VersionRangeView
    finalized_command_set_version: int
    # Why this node left Raft: an entry of a command set it does not speak, or a failed sync
    # or full disk (`sync_failed: ...`, `disk_full: ...`, naming the file and the errno);
    # None while it takes part. Alert on it.
    halted: str | None = None
    # Whether this node's last journal syncs are over leader_sync_slow_ms: it hands over any
    # leadership it holds and stands for no election (docs/reliability.md).
    disk_slow: bool = False
    # Whether the cluster file sets `store`: without it every checkpoint is fenced, and
    # partitions recover only by replaying the source log from the start.
    store_set: bool = True
    # What an operator should fix about this cluster's settings, in words (empty: nothing).
    warnings: list[str] = []
    # Whether this node votes: false while it joins (not yet added), and once removed.
    voter: bool = True
    # Maintenance mode as this node's state has it (None: off); the dashboard shows it.
    maintenance: MaintenanceView | None = None


class CoordinatorVersions(_Response):
    """One coordinator node's record in the replicated state (ReportVersions)."""

    node_id: str
    package_version: str
    min_version: int
    max_version: int
    reported_at_ms: int
    voter: bool


class BackupView(_Response):
    cluster_id: str
    applied_index: int
    term: int
    sha256: str
    size_bytes: int
    created_at_ms: int
    recorded_at_ms: int


class StatusResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    node_id: str
    role: str
    leader_id: str | None
    term: int
    cluster: ClusterSummary
    partitions_by_status: dict[str, int]
    workers_by_state: dict[str, int]
    migrations_in_flight: int
    # The command-set versions: the finalized one, the voters, and what each coordinator
    # node said it speaks and runs (a voter missing here has not reported yet).
    finalized_command_set_version: int
    voters: list[str]
    coordinators: list[CoordinatorVersions]
    # The newest backup `ripple backup` stored and recorded; None before the first.
    last_backup: BackupView | None = None
    # Maintenance mode: no automatic balance while it is on (None: off).
    maintenance: MaintenanceView | None = None
    warnings: list[str] = []  # as in /v1/health
    # The newest rescale, in flight or DONE (None: the cluster never rescaled).
    rescale: RescaleView | None = None


# -- coordinator nodes ---------------------------------------------------------------------

Address = Annotated[str, Field(min_length=3, max_length=ADDRESS_LEN_MAX)]


class NodeAddRequest(_Request):
    """A node to add: its id, the host:port the others dial for Raft, its HTTP host:port."""

    id: Id
    raft: Address
    http: Address


class NodeView(_Response):
    id: str
    raft: str
    http: str
    url: str
    voter: bool  # false: a learner, fed the log before it votes (the leader's view only)
    leader: bool
    # The leader's view only (None elsewhere): the last entry the node is known to hold,
    # and whether it answered within leader_fallback_timeout_s.
    match_index: int | None = None
    answering: bool | None = None
    # The Raft transport version of this node's link to it (None: no open link).
    transport_version: int | None = None


class ChangeView(_Response):
    id: str
    kind: Literal["add", "remove", "replace"]
    node_id: str | None  # the node added
    old_node_id: str | None  # the node removed
    phase: Literal[
        "catching_up",
        "adding",
        "handing_off",
        "removing",
        "done",
        "handed_off",
        "interrupted",
        "failed",
    ]
    started_ms: int
    error: str | None = None


class NodesResponse(_Response):
    generation: int
    applied_index: int
    stale: bool
    node_id: str  # the node that answered
    cluster_id: str
    leader_id: str | None
    voter: bool  # whether the answering node votes
    nodes: list[NodeView]
    # The change running on the leader (None elsewhere, or when none runs), and the last one
    # that ended there; `membership_pending`: a membership entry this node holds uncommitted.
    change: ChangeView | None = None
    last_change: ChangeView | None = None
    membership_pending: bool = False


class NodeChangeResponse(_Response):
    change: ChangeView | None  # None: nothing to do (already so)
    nodes: list[NodeView]


DrainResponse.model_rebuild()
