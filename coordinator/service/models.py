"""Request and response bodies of the coordinator's HTTP API, declared once.

These pydantic models are the single source of the wire shapes: handlers validate
requests with them (so a validation error names the offending field) and the OpenAPI
document at `GET /v1/openapi.json` is generated from them. Requests are strict (a bool is
not an int, unknown fields are refused) and every list or map has a named bound.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from coordinator.core.load import RATE_PER_S_MAX
from coordinator.core.model import INT_VALUE_MAX, NOTE_LEN_MAX, MigrationPhase
from coordinator.service.rescale_models import RescaleView

ID_REGEX = r"^[A-Za-z0-9._-]{1,64}$"
ADDRESS_LEN_MAX = 512
URI_LEN_MAX = 1024
MOVES_MAX = 10_000
CHECKPOINT_ENTRIES_MAX = 100_000
BATCH_ERROR_LEN_MAX = 1000

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# scheme://host:port, the host a DNS name of up to three labels or a dotted IPv4 address
# (first character not 0, which keeps 0.0.0.0 out), the port 1..65535: a subset of what
# coordinator.service.address accepts (that check is the judge).
_NAME = rf"[A-Za-z1-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?(?:\.{_LABEL}){{0,2}}"
_IPV4 = r"[1-9][0-9]{0,2}(?:\.[0-9]{1,3}){3}"
ADDRESS_PATTERN = rf"^https?://(?:{_NAME}|{_IPV4}):{_PORT}$"

Id = Annotated[str, Field(pattern=ID_REGEX)]
# Every integer is range-checked here, before it reaches the codec: msgpack cannot encode
# past 64 bits (an OverflowError at propose time was a 500).


def _integral(value: object) -> object:
    """JSON Schema counts 5.0 as an integer (and clients that hold numbers as doubles send
    it); strict parsing would refuse it. A float with a fraction, a bool or a string still
    fails the strict int check after this."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


NonNeg = Annotated[int, Field(ge=0, le=INT_VALUE_MAX), BeforeValidator(_integral)]
Positive = Annotated[int, Field(ge=1, le=INT_VALUE_MAX), BeforeValidator(_integral)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorBody(_Response):
    error: str
    message: str
    field: str | None = None


# -- workers -----------------------------------------------------------------------------


class RegisterRequest(_Request):
    worker_id: Id
    # Scheme, host and port only: checked by coordinator.service.address (the leader calls
    # this URL with the worker's call token, so nothing in it may steer that call).
    address: Annotated[
        str,
        Field(
            min_length=1,
            max_length=ADDRESS_LEN_MAX,
            # Documents the shape for clients (schema only: check_address is the judge and
            # names the rule that failed). Stricter than the check: IPv6 literals and names
            # of more than three labels pass the check but not this pattern.
            json_schema_extra={"pattern": ADDRESS_PATTERN},
        ),
    ]
    # The worker's --store: refused (409 store_mismatch) when it is not the cluster's store,
    # whose checkpoint references would all be fenced. Absent: not checked.
    store: Annotated[str, Field(min_length=1, max_length=URI_LEN_MAX)] | None = None


class RegisterResponse(_Response):
    worker_id: str
    incarnation: int
    # Presented by the worker to the coordinator; expires, renewed by every heartbeat.
    token: str
    token_expires_at_ms: int
    # Presented by the leader to the worker (host / release / checkpoint calls).
    call_token: str
    heartbeat_interval_s: float
    lease_s: float


class PartitionReport(_Request):
    epoch: NonNeg
    offset: NonNeg
    # Sent only while the partition's micro-batches keep failing (docs/pipeline.md).
    failures: NonNeg = 0
    error: Annotated[str, Field(max_length=BATCH_ERROR_LEN_MAX)] = ""
    # The source log's end offset as the worker last saw it (lag = source_end - offset);
    # absent until the worker has looked.
    source_end: NonNeg | None = None
    # Records per second arriving for the partition, smoothed by the worker; absent until
    # it has seen the source grow (load-aware placement, docs/design.md §4).
    rate: Annotated[float, Field(ge=0.0, le=RATE_PER_S_MAX, allow_inf_nan=False)] | None = None


class HeartbeatRequest(_Request):
    incarnation: Positive
    load: Annotated[float, Field(ge=0.0, le=1e6)] = 0.0
    # Keys are partition numbers as strings (JSON object keys); bounded by the handler
    # against heartbeat_partitions_max because the bound is a config key.
    partitions: Annotated[
        dict[Annotated[str, Field(pattern=r"^[0-9]{1,7}$")], PartitionReport],
        # The key pattern is the only way in: say so, or the schema admits any other key.
        Field(json_schema_extra={"additionalProperties": False}),
    ] = {}


class AssignmentEntry(_Response):
    partition: int
    epoch: int


class HeartbeatResponse(_Response):
    generation: int
    assignment: list[AssignmentEntry]
    checkpoint_due: bool
    # The worker's token, renewed: the worker replaces the one it holds.
    token: str | None = None
    token_expires_at_ms: int | None = None


class RestartingRequest(_Request):
    incarnation: Positive


class RestartingResponse(_Response):
    worker_id: str
    incarnation: int
    # Partitions the leader holds for the worker (it gets them back if it registers again in
    # time, with its saved token), and how long it holds them.
    partitions: int
    rejoin_grace_s: float


class CheckpointEntry(_Request):
    partition: NonNeg
    epoch: NonNeg
    offset: NonNeg
    uri: Annotated[str, Field(min_length=1, max_length=URI_LEN_MAX)]


class CheckpointsRequest(_Request):
    worker_id: Id
    incarnation: Positive
    checkpoints: Annotated[list[CheckpointEntry], Field(max_length=CHECKPOINT_ENTRIES_MAX)]


class CheckpointResult(_Response):
    partition: int
    status: Literal["accepted", "fenced"]
    reason: str = ""


class CheckpointsResponse(_Response):
    results: list[CheckpointResult]


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
    partition: int
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
    history: list[HistoryEntry]


# A migration's phase as the API names it (docs/design.md §4 has the lifecycle).
Phase = Annotated[str, Field(description=" | ".join(p.value for p in MigrationPhase))]


class MigrationView(_Response):
    id: str
    partition: int
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
    partition: int
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
