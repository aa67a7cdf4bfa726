"""Commands (the replicated log's entries) and their results.

Owns the command vocabulary. Each command class has a fixed numeric ``TAG`` that is part of
the wire format: a tag is never reused or renumbered, a retired command keeps its number.
Everything ``apply`` needs (timestamps, ids) is stamped into the command by the proposer, so
applying a command reads no clock and no randomness and every replica reaches the same state.
Results are values, never exceptions: the replicated apply must not raise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from coordinator.core.model import Epoch, MigrationId, MigrationReason, PartitionId, WorkerId

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


# --- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap:
    TAG: ClassVar[int] = 1
    total_partitions: int
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterWorker:
    TAG: ClassVar[int] = 2
    worker_id: WorkerId
    address: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclareDead:
    TAG: ClassVar[int] = 3
    worker_ids: tuple[WorkerId, ...]
    assignments: tuple[Assignment, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignPartitions:
    TAG: ClassVar[int] = 4
    assignments: tuple[Assignment, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOnline:
    TAG: ClassVar[int] = 5
    partition: PartitionId
    epoch: Epoch
    owner: WorkerId
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanMigrations:
    TAG: ClassVar[int] = 6
    moves: tuple[Move, ...]
    reason: MigrationReason
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRelease:
    TAG: ClassVar[int] = 7
    migration_id: MigrationId
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HandOff:
    TAG: ClassVar[int] = 8
    migration_id: MigrationId
    # None when the source could not produce one (dead, timed out): keep the last accepted.
    checkpoint: FinalCheckpoint | None
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortMigration:
    TAG: ClassVar[int] = 9
    migration_id: MigrationId
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordCheckpoints:
    TAG: ClassVar[int] = 10
    worker_id: WorkerId
    incarnation: int
    entries: tuple[CheckpointReport, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainWorker:
    TAG: ClassVar[int] = 11
    worker_id: WorkerId
    moves: tuple[Move, ...]
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Barrier:
    TAG: ClassVar[int] = 12
    nonce: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FallBack:
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
class MarkStuck:
    """No lossless fallback is left: say so on the partition until an operator resets it."""

    TAG: ClassVar[int] = 14
    partition: PartitionId
    epoch: Epoch
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetPartition:
    """Operator: forget the partition's checkpoints and host it from offset 0 (new epoch)."""

    TAG: ClassVar[int] = 15
    partition: PartitionId
    note: str
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
)
COMMAND_BY_TAG: dict[int, type[Command]] = {cls.TAG: cls for cls in COMMAND_TYPES}
assert len(COMMAND_BY_TAG) == len(COMMAND_TYPES), "command tags must be unique"

# --- results -----------------------------------------------------------------------------------

# Rejection codes and the HTTP status the service should answer with.
STATUS_BY_CODE: dict[str, int] = {
    "invalid": 400,
    "not_found": 404,
    "conflict": 409,
    "stale_epoch": 409,
    "fenced": 409,
    "not_bootstrapped": 503,
    "internal": 500,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok:
    # msgpack-able plain data only (str keys, lists not tuples) so it round-trips exactly.
    value: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    code: str
    message: str
    status: int
    field: str | None = None


Result = Ok | Rejected


def rejected(code: str, message: str, field: str | None = None) -> Rejected:
    """A Rejected whose status is the one registered for ``code``."""
    return Rejected(code=code, message=message, status=STATUS_BY_CODE[code], field=field)
