"""What the planner hands its shell and what the shell hands back, as values.

Owns the vocabulary between the pure planner (`coordinator/core/planner.py`) and whoever runs
it: the `Batch` a plan returns (commands to commit, worker calls to make, when to plan again),
the outcome of each command (`CommitOutcome`) and the result of each call. Like raft's
`Ready`, these are plain frozen values: the planner never sees a socket, the shell never
decides. `coordinator/core/executor.py` holds the rule a Batch is run by.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from coordinator.core.commands import BuiltCheckpoint, Command, FinalCheckpoint
from coordinator.core.model import Checkpoint, Epoch, MigrationId, PartitionId, WorkerId

__all__ = [
    "Batch",
    "BuildCall",
    "BuildDone",
    "CheckpointCall",
    "CheckpointDone",
    "CommitOutcome",
    "CutCall",
    "CutDone",
    "HostCall",
    "HostDone",
    "ReleaseCall",
    "ReleaseDone",
    "ReleaseOutcome",
    "WarmCall",
    "WarmDone",
    "WorkerCall",
    "WorkerResult",
    "call_key",
]


# --- worker calls (what the executor sends) -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCall:
    partition: PartitionId
    epoch: Epoch
    worker_id: WorkerId
    address: str
    incarnation: int
    # Where the worker starts: None means a replay from the source's beginning.
    checkpoint: Checkpoint | None
    # The partition count of each routing generation (the state's `routing`).
    routing: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseCall:
    migration_id: MigrationId
    partition: PartitionId
    epoch: Epoch
    worker_id: WorkerId
    address: str
    incarnation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointCall:
    worker_id: WorkerId
    address: str
    incarnation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmCall:
    """Ask a WARMING migration's target to warm the partition up (or how far it is): load
    `checkpoint` (None: from offset 0) and follow the source log, read-only."""

    migration_id: MigrationId
    partition: PartitionId
    worker_id: WorkerId
    address: str
    incarnation: int
    checkpoint: Checkpoint | None
    routing: tuple[int, ...] = ()  # as HostCall's


@dataclass(frozen=True, slots=True, kw_only=True)
class CutCall:
    """Ask old partition `partition`'s owner at `epoch` to seal it and checkpoint at its cut
    (or whether it has): generation `generation` ends, the next has `partitions`."""

    partition: PartitionId
    epoch: Epoch
    worker_id: WorkerId
    address: str
    incarnation: int
    generation: int
    partitions: int
    routing: tuple[int, ...]  # the counts of generations 0..generation


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildCall:
    """Ask one worker to build (or how far it is building) every new partition's starting
    checkpoint of generation `generation` from the old partitions' cut checkpoints."""

    generation: int
    worker_id: WorkerId
    address: str
    incarnation: int
    routing: tuple[int, ...]  # the counts of generations 0..generation
    epoch: Epoch  # the rescale's base epoch: the new checkpoints are written at it
    cuts: tuple[tuple[PartitionId, Checkpoint], ...]  # one per old partition


WorkerCall = HostCall | ReleaseCall | CheckpointCall | WarmCall | CutCall | BuildCall


# --- results of worker calls (what the executor feeds back) ---------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HostDone:
    call: HostCall
    ok: bool
    # The worker's error code when it answered one (say "checkpoint_unavailable").
    code: str | None = None
    message: str = ""


class ReleaseOutcome(Enum):
    RELEASED = "released"  # 200: the source stopped; `checkpoint` is its final one (or None)
    REFUSED = "refused"  # 409: the source does not hold this epoch; hand off anyway
    FAILED = "failed"  # anything else: retry later


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseDone:
    call: ReleaseCall
    outcome: ReleaseOutcome
    checkpoint: FinalCheckpoint | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointDone:
    call: CheckpointCall
    ok: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmDone:
    call: WarmCall
    # 200: the target holds a warm copy; `loaded` once its checkpoint is in, then `offset`
    # (the next record it would read) against `head` (the source log's end it last listed).
    ok: bool
    loaded: bool = False
    offset: int = 0
    head: int = 0
    # The worker's error code when it refused (say "warm_refused"): go cold at once.
    code: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CutDone:
    call: CutCall
    # 200 with done: the checkpoint at exactly the cut is written (`offset`, `uri`); 200
    # without: ask again; not ok: the worker refused or failed (the next plan asks again).
    ok: bool
    done: bool = False
    offset: int = 0
    uri: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildDone:
    call: BuildCall
    ok: bool
    done: bool = False
    checkpoints: tuple[BuiltCheckpoint, ...] = ()


WorkerResult = HostDone | ReleaseDone | CheckpointDone | WarmDone | CutDone | BuildDone


class CommitOutcome(Enum):
    OK = "ok"
    REJECTED = "rejected"  # the machine refused it: the state did not change
    UNKNOWN = "unknown"  # no answer in time: it may or may not have been applied
    SKIPPED = "skipped"  # not proposed, because an earlier command of the batch failed


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    commands: tuple[Command, ...] = ()
    calls: tuple[WorkerCall, ...] = ()
    wake_at_ms: int = 0


def call_key(call: WorkerCall) -> tuple[str, object]:
    """What makes two calls the same call: at most one per key is in flight."""
    if isinstance(call, HostCall):
        return ("host", (call.partition, call.epoch))
    if isinstance(call, ReleaseCall):
        return ("release", call.migration_id)
    if isinstance(call, WarmCall):
        return ("warm", call.migration_id)
    if isinstance(call, CutCall):
        return ("cut", call.partition)
    if isinstance(call, BuildCall):
        return ("build", call.generation)
    return ("checkpoint", call.worker_id)
