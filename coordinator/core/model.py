"""Records of the replicated coordinator state: ids, lifecycles, bounds.

Owns the vocabulary every replica agrees on. Records are frozen: the state machine replaces
them (``dataclasses.replace``) instead of mutating them, so a record handed to a reader is
never changed under its feet. Every bound the core enforces is a named constant here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import NewType

from shared.messages.common import INT_VALUE_MAX as _INT_VALUE_MAX
from shared.messages.common import ROUTING_GENERATIONS_MAX as _ROUTING_GENERATIONS_MAX
from shared.routing import KEY_GROUPS
from shared.routing import SLOT_BASE as ROUTING_SLOT_BASE
from shared.spec.parse import SPEC_BYTES_MAX

WorkerId = NewType("WorkerId", str)
# A partition's number, 0 .. total_partitions - 1, as records, commands and the planner's
# calls carry it: made by Bootstrap and by the codec (apply still checks a command's against
# the state); a number from outside (a request, a worker's report) is an int until then.
PartitionId = NewType("PartitionId", int)
# The fencing token: made at Bootstrap, where a partition is (re)assigned (edits.py's
# reassign) and by the codec, so mypy shows any other place that would invent one.
Epoch = NewType("Epoch", int)
MigrationId = NewType("MigrationId", str)
# A pipeline's name: an id (`valid_id`), unique among the pipelines the state holds.
PipelineName = NewType("PipelineName", str)
# One partition at one epoch: what a host call, its retries and its failures are about.
PartitionEpoch = tuple[PartitionId, Epoch]

ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")

# Bounds. "Put a limit on everything": each one caps memory held by every replica or the size
# of one log entry.
HISTORY_PER_PARTITION_MAX = 16
# Accepted checkpoints kept per partition besides the current one, newest first: the fallback
# chain when the current one cannot be loaded (docs/architecture.md, "No partition stays
# stuck"). Each costs one URI per partition on every replica.
CHECKPOINTS_KEPT_MAX = 3
REQUESTS_RETAINED_MAX = 10_000
TERMINAL_MIGRATIONS_RETAINED_MAX = 1_000
BATCH_ITEMS_MAX = 200_000
ADDRESS_LEN_MAX = 512
URI_LEN_MAX = 1024
REQUEST_ID_LEN_MAX = 64
TOTAL_PARTITIONS_MAX = 1_000_000
NOTE_LEN_MAX = 256
NONCE_LEN_MAX = 64
PACKAGE_VERSION_LEN_MAX = 64
# The first numbered command-set version (coordinator/core/versions.py): what a cluster is
# finalized at until its leader raises it.
FIRST_COMMAND_SET_VERSION = 1
SHA256_HEX_LEN = 64
# Coordinator nodes whose command-set versions the state records: far more than any voter
# set, so a record is never refused for room while bounding what a hostile entry can add.
NODE_VERSIONS_MAX = 64
# Who turned maintenance mode on or off (the admin caller's identity, or the leader's own
# name for an expiry): a label shown to operators, not an id anything is looked up by.
MAINTENANCE_BY_LEN_MAX = 64
# A rescale's new partition count: every generation after 0 routes through KEY_GROUPS fixed
# key groups (shared/routing.py), so it cannot have more partitions than groups.
RESCALE_PARTITIONS_MAX = KEY_GROUPS
# Routing generations a cluster may have (`ClusterState.routing`; every host call carries
# the list) and the largest integer a command carries: the wire's bounds, declared with the
# messages.
ROUTING_GENERATIONS_MAX = _ROUTING_GENERATIONS_MAX
INT_VALUE_MAX = _INT_VALUE_MAX

# Pipelines (coordinator/core/pipeline_commands.py). The one a cluster has without any record:
# its own partition table and routing (coordinator/core/pipelines.py), a name nobody creates.
DEFAULT_PIPELINE = PipelineName("default")
# Pipeline records the state holds: the scale goal is a thousand, with room.
PIPELINES_MAX = 4_096
# The first number a recorded pipeline's partitions are carried under: above every number
# `default`'s table can use, so `default` keeps 0 .. total_partitions - 1 through its
# rescales. Numbers come from a counter that only grows (`ClusterState.slot_seq`): a dropped
# pipeline's numbers, and the epochs workers' gates hold for them, are never met again.
SLOT_BASE = ROUTING_SLOT_BASE
# A pipeline's partition count: as a rescale's (each generation after 0 routes by key groups).
PIPELINE_PARTITIONS_MAX = RESCALE_PARTITIONS_MAX
# A spec's text as the replicated record holds it: the spec format's own bound.
SPEC_TEXT_BYTES_MAX = SPEC_BYTES_MAX
# Every record's spec text together: what specs add to each snapshot and to each replica's
# memory (PIPELINES_MAX specs of the largest size would be a gigabyte); a thousand specs of
# 16 KiB fit.
SPEC_TEXT_BYTES_TOTAL_MAX = 32 * 1024 * 1024
# A pool's selector: at most this many labels, each key and value an id.
POOL_LABELS_MAX = 16
# Tokens one pipeline's record holds (IssueToken): enough for a team's few holders and a
# rotation in progress; a revoked one frees its place.
PIPELINE_TOKENS_MAX = 16
# A token's public id: printable, short (coordinator/service/pipeline_tokens.py makes them).
TOKEN_ID_LEN_MAX = 32
# A worker's labels (ProfileWorker), each key and value an id, and its slots: the most
# partitions of recorded pipelines it takes.
WORKER_LABELS_MAX = 32
WORKER_SLOTS_MAX = 100_000
# Per-pipeline settings' bounds: a micro-batch interval, a checkpoint interval (not shorter than
# the batch interval), keys one partition keeps, and how long its source log is kept (0: for
# ever, as a cluster without retention keeps it).
BATCH_INTERVAL_MS_MIN, BATCH_INTERVAL_MS_MAX = 100, 3_600_000
CHECKPOINT_INTERVAL_MS_MIN, CHECKPOINT_INTERVAL_MS_MAX = 1_000, 86_400_000
KEYS_PER_PARTITION_MAX = 100_000_000
RETENTION_MS_MAX = 3_650 * 86_400_000


def valid_id(s: object) -> bool:
    """True iff ``s`` is a str made only of ``[A-Za-z0-9._-]``, 1 to 64 characters."""
    return isinstance(s, str) and ID_PATTERN.fullmatch(s) is not None


class WorkerState(Enum):
    ACTIVE = "active"
    DRAINING = "draining"
    DEAD = "dead"
    LEFT = "left"


class PartitionStatus(Enum):
    UNASSIGNED = "unassigned"
    ASSIGNING = "assigning"
    ONLINE = "online"


class MigrationPhase(Enum):
    PLANNED = "planned"
    # The target loads the partition's checkpoint and follows its source log, read-only,
    # while the source still owns and serves it (docs/design.md §4, warm hand-offs).
    WARMING = "warming"
    RELEASING = "releasing"
    HANDED_OFF = "handed_off"
    DONE = "done"
    ABORTED = "aborted"


class MigrationReason(Enum):
    ADMIN = "admin"
    DRAIN = "drain"
    FAILURE = "failure"


class ChangeReason(Enum):
    ASSIGNED = "assigned"
    FAILURE = "failure"
    MIGRATION = "migration"
    DRAIN = "drain"
    RESTART = "restart"
    ABORT = "abort"
    # The recorded checkpoint could not be loaded: hosted again from an older one (or none).
    FALLBACK = "fallback"
    # An operator discarded the partition's checkpoints (POST /v1/admin/partitions/{p}/reset).
    RESET = "reset"
    # The cluster was made anew from a backup or a survivor's data directory (`ripple
    # restore`, `ripple recover`): every epoch jumped, so nothing of the old cluster fences in.
    RESTORE = "restore"
    # The partition was made by a rescale (StatesBuilt): the first entry of its timeline.
    RESCALE = "rescale"


# Workers in these states may own partitions; DEAD and LEFT workers own none.
OWNING_WORKER_STATES = frozenset({WorkerState.ACTIVE, WorkerState.DRAINING})
# Workers that left the cluster (declared dead, or drained to the end); retired from the
# state after the retention window (coordinator/core/retirement.py).
DEPARTED_WORKER_STATES = frozenset({WorkerState.DEAD, WorkerState.LEFT})
TERMINAL_PHASES = frozenset({MigrationPhase.DONE, MigrationPhase.ABORTED})


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerProfile:
    """What a worker offers recorded pipelines (ProfileWorker): its labels, sorted by key,
    which pools select on, and its slots, the most of their partitions it takes."""

    labels: tuple[Label, ...]
    slots: int

    def carries(self, pool: tuple[Label, ...]) -> bool:
        """True iff every label of `pool` is one of this worker's."""
        return set(pool) <= set(self.labels)


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    worker_id: WorkerId
    address: str
    incarnation: int
    state: WorkerState
    # First registration of this id; updated_at_ms moves on every state or address change.
    registered_at_ms: int
    updated_at_ms: int
    # None: it runs `default`'s partitions only (it declared no profile at this
    # incarnation: a re-registration clears it, its ProfileWorker sets it again).
    profile: WorkerProfile | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    offset: int
    uri: str
    # The epoch under which the checkpoint was written (may be older than the partition's).
    epoch: Epoch
    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnershipChange:
    epoch: Epoch
    owner: WorkerId | None
    reason: ChangeReason
    at_ms: int
    # Why, in words, when the reason alone does not say (a fallback's failure and target).
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    partition: PartitionId
    owner: WorkerId | None
    # The fencing token: strictly increases with every ownership (re)assignment.
    epoch: Epoch
    status: PartitionStatus
    migration: MigrationId | None
    checkpoint: Checkpoint | None
    # The last HISTORY_PER_PARTITION_MAX changes, oldest first.
    history: tuple[OwnershipChange, ...]
    # Accepted checkpoints before ``checkpoint``, newest first, at most CHECKPOINTS_KEPT_MAX.
    earlier: tuple[Checkpoint, ...] = ()
    # Why the partition cannot come online without an operator ("" = it is not stuck).
    stuck: str = ""
    # The pipeline it is a partition of: `default`'s are numbered 0 .. total_partitions - 1,
    # a recorded pipeline's from its `first_slot` (its own number is the difference).
    pipeline: PipelineName = DEFAULT_PIPELINE


def unassigned_partition(number: int, pipeline: PipelineName = DEFAULT_PIPELINE) -> Partition:
    """A partition as a table first holds it: nobody's, at epoch 0, with no checkpoint."""
    return Partition(
        partition=PartitionId(number),
        owner=None,
        epoch=Epoch(0),
        status=PartitionStatus.UNASSIGNED,
        migration=None,
        checkpoint=None,
        history=(),
        pipeline=pipeline,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    migration_id: MigrationId
    partition: PartitionId
    source: WorkerId
    target: WorkerId
    phase: MigrationPhase
    reason: MigrationReason
    created_at_ms: int
    updated_at_ms: int
    # Why it was aborted; "" otherwise.
    note: str


class RescalePhase(Enum):
    """A rescale's steps (docs/pipeline.md, "Rescaling"); each ends at one commit. The
    replicated state spells them upper case (`wire_fields.WIRE_SPELLING`)."""

    CUTTING = "cutting"  # each old partition's owner seals it and checkpoints at its cut
    MOVING = "moving"  # one worker builds every new partition's starting checkpoint
    HOSTING = "hosting"  # the new partitions are hosted from those checkpoints
    DONE = "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rescale:
    """The newest rescale (StartRescale): kept after DONE, replaced by the next one."""

    generation: int  # the new routing generation (g + 1)
    partitions: int  # its partition count M
    previous: int  # the old count P
    phase: RescalePhase
    # Per old partition p: its cut checkpoint once recorded (RecordCut), P entries.
    cuts: tuple[Checkpoint | None, ...]
    # Set when the last cut commits (phase -> MOVING): 1 + the highest epoch of any old
    # partition then; the new partitions' starting checkpoints are written at this epoch.
    base_epoch: Epoch | None
    by: str  # who asked (the admin caller)
    started_at_ms: int
    updated_at_ms: int

    def cuts_done(self) -> int:
        return sum(1 for c in self.cuts if c is not None)


class PipelineState(Enum):
    """A pipeline's lifecycle (`coordinator/core/lifecycle.py`'s pipeline table); a dropped
    one's record leaves the state (ForgetPipeline), so "gone" is no state."""

    CREATING = "creating"  # recorded: a leader sets it up, then ActivatePipeline
    ACTIVE = "active"
    PAUSED = "paused"  # processing stops, offsets and checkpoints kept
    DROPPING = "dropping"  # recorded: a leader tears it down, then ForgetPipeline


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Label:
    """One label of a pool's selector: a worker is in the pool when it carries every one."""

    key: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSettings:
    """What an owner tunes per pipeline, each within its bounds above."""

    batch_interval_ms: int
    checkpoint_interval_ms: int
    max_keys_per_partition: int
    retention_ms: int  # 0: keep the source log for ever


# The settings a pipeline gets when its create names none: the worker's own defaults.
DEFAULT_PIPELINE_SETTINGS = PipelineSettings(
    batch_interval_ms=500,
    checkpoint_interval_ms=10_000,
    max_keys_per_partition=2_000,
    retention_ms=0,
)


class TokenRole(Enum):
    """What a pipeline's token lets its holder do (docs/security.md, "Pipeline tokens")."""

    OPERATE = "operate"  # pause, resume and drop that pipeline, and produce to it
    PRODUCE = "produce"  # append records to that pipeline through a worker, nothing else


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineToken:
    """One token scoped to a pipeline. Only the hash of its secret is recorded, so the log,
    a snapshot or a backup holds nothing a caller could present."""

    token_id: str  # public: names the token in lists and revocations
    role: TokenRole
    sha256: str  # hex sha256 of the secret's bytes
    created_at_ms: int
    by: str  # who issued it


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotRange:
    """The partition numbers one routing generation of a recorded pipeline was carried
    under: first_slot .. first_slot + partitions - 1."""

    first_slot: int
    partitions: int
    routing_generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineRescale:
    """A recorded pipeline's newest rescale or spec update (StartPipelineRescale): the same
    steps as `Rescale`, on fresh partition numbers reserved at the start, so the old and the
    new generation never share a gate, a checkpoint or a source log."""

    generation: int  # the pipeline's new routing generation (g + 1)
    partitions: int  # its partition count M
    previous: int  # the old count P
    # The first of the M numbers reserved from `ClusterState.slot_seq` at the start; they
    # join the table at HOSTING (PipelineStatesBuilt).
    first_slot: int
    # The new generation's spec. The text is carried only while it is new and not yet the
    # pipeline's (an update, before HOSTING); "" otherwise, so no text is held twice.
    spec_text: str
    spec_sha256: str
    spec_version: int  # the pipeline's for a plain rescale, one more for an update
    phase: RescalePhase
    # Per old partition index 0 .. P - 1: its cut checkpoint once recorded.
    cuts: tuple[Checkpoint | None, ...]
    # Set by the last cut (phase -> MOVING): 1 + the highest epoch in the whole table then.
    base_epoch: Epoch | None
    by: str
    started_at_ms: int
    updated_at_ms: int

    def cuts_done(self) -> int:
        return sum(1 for c in self.cuts if c is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline:
    """A pipeline (CreatePipeline): its spec, its partitions and routing, where it may run,
    its settings and where it is in its lifecycle."""

    name: PipelineName
    # Made by apply from the state's counter at create and never reused: a leader's step of
    # one incarnation (ActivatePipeline, ForgetPipeline) cannot land on a namesake made since.
    incarnation: int
    spec_text: str  # the owner's TOML, transform embedded: what every worker parses and runs
    spec_sha256: str  # hex sha256 of spec_text's UTF-8 bytes (apply checks it at create)
    spec_version: int  # 1 at create; one more per spec change (never back)
    partitions: int
    routing_generation: int
    pool: tuple[Label, ...]  # the selector, sorted by key; () is every worker
    settings: PipelineSettings
    state: PipelineState
    purge: bool  # DROPPING: the drop also deletes its objects in the store
    created_at_ms: int
    updated_at_ms: int
    by: str  # who asked for the last change (the admin caller)
    # The number its partition 0 is carried under (SLOT_BASE and up): set when a leader sets
    # the pipeline up (ActivatePipeline); 0 until then and for `default`.
    first_slot: int = 0
    # Tokens scoped to this pipeline (IssueToken), oldest first; they go with its record.
    tokens: tuple[PipelineToken, ...] = ()

    # The newest rescale or spec update of this pipeline (StartPipelineRescale), kept after
    # DONE and replaced by the next one (coordinator/core/pipeline_rescale.py).
    rescale: PipelineRescale | None = None
    # The partition numbers of each earlier routing generation, oldest first: producers,
    # the batch job and a purge need every generation's (at most ROUTING_GENERATIONS_MAX).
    past: tuple[SlotRange, ...] = ()

    def pool_labels(self) -> dict[str, str]:
        return {label.key: label.value for label in self.pool}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeVersions:
    """What one coordinator node said it speaks: the command-set versions (a range) and its
    release (docs/design.md §10)."""

    node_id: str
    min_version: int
    max_version: int
    package_version: str
    reported_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BackupRecord:
    """The newest backup an operator's tool stored (`ripple backup`), as it reported it."""

    cluster_id: str
    applied_index: int
    term: int
    sha256: str  # of the backup's body, hex
    size_bytes: int
    created_at_ms: int
    recorded_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceRecord:
    """Maintenance mode is on (MaintenanceOn): who turned it on, why and when (wall ms), and
    when it ends by itself (wall ms, None: when turned off). `until_ms` is shown to
    operators; the leader times the end on its monotonic clock
    (`coordinator/core/maintenance_timer.py`)."""

    by: str
    reason: str
    since_ms: int
    until_ms: int | None
