"""What the planner hands its shell and what the shell hands back, as values.

Owns the vocabulary between the pure planner (`coordinator/core/planner.py`) and whoever runs
it: the `Batch` a plan returns (commands to commit, worker calls to make, when to plan again),
the outcome of each command (`CommitOutcome`) and the result of each call. Like raft's
`Ready`, these are plain frozen values: the planner never sees a socket, the shell never
decides. `coordinator/core/executor.py` holds the rule a Batch is run by.

Each call also says what it means on the wire, beside its declaration: `request` is the
message that makes it (`shared/messages/`) and `result` what a worker's transport-neutral
`Answer` means to the planner, every checkpoint a reply names passing the shell's `Fence`.
Invariant: a malformed reply, a fenced checkpoint, a refusal or no answer is never a
success; the planner asks again or takes the failure path. Whoever carries a call (the
leader's HTTP client, the simulation, the scenario interpreter) goes through these two, so
what an answer means is decided here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from coordinator.core import commands
from coordinator.core.commands import BuiltCheckpoint, Command, FinalCheckpoint
from coordinator.core.model import (
    Checkpoint,
    Epoch,
    MigrationId,
    PartitionId,
    PipelineName,
    WorkerId,
)
from shared.messages.checkpoint import CheckpointRequest
from shared.messages.common import Answer, ErrorReply, Fence, Outcome, SentCheckpoint
from shared.messages.host import HostRequest
from shared.messages.pipeline_rescale import PipelineBuildRequest, PipelineCut
from shared.messages.release import ReleaseReply, ReleaseRequest
from shared.messages.rescale import BuildReply, BuildRequest, CutCheckpoint, CutReply, CutRequest
from shared.messages.warm import UnwarmRequest, WarmReply, WarmRequest

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
    "PipelineBuildCall",
    "PipelineCutCall",
    "ReleaseCall",
    "ReleaseDone",
    "ReleaseOutcome",
    "UnwarmCall",
    "UnwarmDone",
    "WarmCall",
    "WarmDone",
    "WorkerCall",
    "WorkerResult",
    "call_key",
]

# A warm-up's code when the worker answered 200 with a body that is not a WarmReply.
INVALID_REPLY = "invalid_reply"


def _sent(ck: Checkpoint | None) -> SentCheckpoint | None:
    return None if ck is None else SentCheckpoint(offset=ck.offset, uri=ck.uri, epoch=ck.epoch)


def _failure(answer: Answer) -> str:
    """How a call that did not succeed was answered, for the shell's log."""
    return f"{answer.outcome.value}: {ErrorReply.from_json(answer.body).message}"


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

    def request(self, *, warm_hold_s: float) -> HostRequest:
        return HostRequest(
            partition=self.partition,
            epoch=self.epoch,
            checkpoint=_sent(self.checkpoint),
            routing=self.routing or None,
        )

    def result(self, answer: Answer, fence: Fence) -> HostDone:
        ok = answer.outcome is Outcome.OK
        error = ErrorReply.from_json(answer.body)
        note = "" if ok else _failure(answer)
        return HostDone(
            call=self, ok=ok, code=error.error or None, message=error.message, note=note
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseCall:
    migration_id: MigrationId
    partition: PartitionId
    epoch: Epoch
    worker_id: WorkerId
    address: str
    incarnation: int

    def request(self, *, warm_hold_s: float) -> ReleaseRequest:
        return ReleaseRequest(
            partition=self.partition, epoch=self.epoch, migration_id=self.migration_id
        )

    def result(self, answer: Answer, fence: Fence) -> ReleaseDone:
        if answer.outcome is Outcome.STALE:
            # The source does not hold this epoch (restarted, or never hosted it).
            return ReleaseDone(call=self, outcome=ReleaseOutcome.REFUSED)
        if answer.outcome is not Outcome.OK:
            return ReleaseDone(call=self, outcome=ReleaseOutcome.FAILED, note=_failure(answer))
        # A reply without a well-formed checkpoint, or one the fence refuses, hands off with
        # the last accepted checkpoint: the new owner replays the source from there, which
        # loses nothing (replay is deterministic).
        ck = ReleaseReply.checkpoint_of(answer.body)
        if ck is None:
            return ReleaseDone(call=self, outcome=ReleaseOutcome.RELEASED)
        problem = fence(self.partition, self.epoch, ck.offset, ck.uri)
        if problem is not None:
            fenced = f"checkpoint {ck.uri!r} fenced ({problem})"
            return ReleaseDone(call=self, outcome=ReleaseOutcome.RELEASED, fenced=fenced)
        final = FinalCheckpoint(offset=ck.offset, uri=ck.uri, epoch=self.epoch)
        return ReleaseDone(call=self, outcome=ReleaseOutcome.RELEASED, checkpoint=final)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointCall:
    worker_id: WorkerId
    address: str
    incarnation: int

    def request(self, *, warm_hold_s: float) -> CheckpointRequest:
        return CheckpointRequest()

    def result(self, answer: Answer, fence: Fence) -> CheckpointDone:
        ok = answer.outcome is Outcome.OK
        return CheckpointDone(call=self, ok=ok, note="" if ok else _failure(answer))


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

    def request(self, *, warm_hold_s: float) -> WarmRequest:
        """Held up to `warm_hold_s` for the copy's next step (`WarmRequest.hold_s`)."""
        return WarmRequest(
            partition=self.partition,
            migration_id=self.migration_id,
            checkpoint=_sent(self.checkpoint),
            routing=self.routing or None,
            hold_s=warm_hold_s,
        )

    def result(self, answer: Answer, fence: Fence) -> WarmDone:
        reply = WarmReply.from_json(answer.body) if answer.outcome is Outcome.OK else None
        if reply is not None:
            return WarmDone(
                call=self, ok=True, loaded=reply.loaded, offset=reply.offset, head=reply.head
            )
        if answer.outcome is Outcome.UNREACHABLE:
            # Unreachable: its liveness decides, not a refusal.
            return WarmDone(call=self, ok=False, note=_failure(answer))
        error = ErrorReply.from_json(answer.body)
        code = (
            INVALID_REPLY if answer.outcome is Outcome.OK else error.error or answer.outcome.value
        )
        return WarmDone(call=self, ok=False, code=code, note=f"{code}: the move goes cold")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnwarmCall:
    """Tell the target of a migration that ended without a hand-off to drop the warm copy it
    made for it; without the call the copy follows the source log until it idles out."""

    migration_id: MigrationId
    partition: PartitionId
    worker_id: WorkerId
    address: str
    incarnation: int

    def request(self, *, warm_hold_s: float) -> UnwarmRequest:
        return UnwarmRequest(partition=self.partition, migration_id=self.migration_id)

    def result(self, answer: Answer, fence: Fence) -> UnwarmDone:
        ok = answer.outcome is Outcome.OK
        return UnwarmDone(call=self, ok=ok, note="" if ok else _failure(answer))


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

    def request(self, *, warm_hold_s: float) -> CutRequest:
        return CutRequest(
            partition=self.partition,
            epoch=self.epoch,
            generation=self.generation,
            partitions=self.partitions,
            routing=self.routing,
        )

    def result(self, answer: Answer, fence: Fence) -> CutDone:
        reply = CutReply.from_json(answer.body) if answer.outcome is Outcome.OK else None
        if reply is None or (reply.partition, reply.epoch) != (self.partition, self.epoch):
            return CutDone(call=self, ok=False, note=_failure(answer))
        if reply.done:
            problem = fence(self.partition, self.epoch, reply.offset, reply.uri or "")
            if problem is not None:
                return CutDone(call=self, ok=False, fenced=problem)
        return CutDone(
            call=self, ok=True, done=reply.done, offset=reply.offset, uri=reply.uri or ""
        )

    def recorded(self, offset: int, uri: str, now_ms: int) -> Command:
        return commands.RecordCut(
            partition=self.partition, epoch=self.epoch, offset=offset, uri=uri, now_ms=now_ms
        )


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

    def request(self, *, warm_hold_s: float) -> BuildRequest:
        return BuildRequest(
            generation=self.generation,
            routing=self.routing,
            epoch=self.epoch,
            cuts=tuple(
                CutCheckpoint(partition=p, offset=c.offset, uri=c.uri, epoch=c.epoch)
                for p, c in self.cuts
            ),
        )

    def result(self, answer: Answer, fence: Fence) -> BuildDone:
        return _built(self, answer, fence)

    def built(self, done: tuple[BuiltCheckpoint, ...], now_ms: int) -> Command:
        return commands.StatesBuilt(generation=self.generation, checkpoints=done, now_ms=now_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineCutCall(CutCall):
    """A CutCall for recorded pipeline `pipeline`'s old partition, named by its number:
    `generation` and `routing` are the pipeline's (the worker seals the run's own log and
    reads them only for the message's bounds)."""

    pipeline: PipelineName
    pipeline_incarnation: int

    def recorded(self, offset: int, uri: str, now_ms: int) -> Command:
        return commands.RecordPipelineCut(
            name=self.pipeline,
            incarnation=self.pipeline_incarnation,
            partition=self.partition,
            epoch=self.epoch,
            offset=offset,
            uri=uri,
            now_ms=now_ms,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineBuildCall:
    """Ask one worker of recorded pipeline `pipeline`'s pool to build (or how far it is
    building) the starting checkpoints of its generation `generation`, numbers
    `first_slot` .. + `partitions` - 1, under the spec hashing to `spec_sha256`."""

    pipeline: PipelineName
    pipeline_incarnation: int
    generation: int
    worker_id: WorkerId
    address: str
    incarnation: int
    first_slot: int
    partitions: int
    epoch: Epoch  # the rescale's base epoch: the new checkpoints are written at it
    spec_sha256: str
    cuts: tuple[tuple[int, Checkpoint], ...]  # one per old partition, by number

    def request(self, *, warm_hold_s: float) -> PipelineBuildRequest:
        return PipelineBuildRequest(
            pipeline=self.pipeline,
            incarnation=self.pipeline_incarnation,
            generation=self.generation,
            first_slot=self.first_slot,
            partitions=self.partitions,
            epoch=self.epoch,
            spec_sha256=self.spec_sha256,
            cuts=tuple(PipelineCut(partition=p, offset=c.offset, uri=c.uri) for p, c in self.cuts),
        )

    def result(self, answer: Answer, fence: Fence) -> BuildDone:
        return _built(self, answer, fence)

    def built(self, done: tuple[BuiltCheckpoint, ...], now_ms: int) -> Command:
        return commands.PipelineStatesBuilt(
            name=self.pipeline,
            incarnation=self.pipeline_incarnation,
            generation=self.generation,
            checkpoints=done,
            now_ms=now_ms,
        )


def _built(call: BuildCall | PipelineBuildCall, answer: Answer, fence: Fence) -> BuildDone:
    """A build reply is done only for the call's generation with every checkpoint fenced in
    at the call's epoch."""
    reply = BuildReply.from_json(answer.body) if answer.outcome is Outcome.OK else None
    if reply is None or reply.generation != call.generation:
        return BuildDone(call=call, ok=False, note=_failure(answer))
    for c in reply.checkpoints:
        problem = fence(c.partition, call.epoch, c.offset, c.uri)
        if problem is not None:
            return BuildDone(call=call, ok=False, fenced=problem)
    built = tuple(
        BuiltCheckpoint(partition=c.partition, offset=c.offset, uri=c.uri)
        for c in reply.checkpoints
    )
    return BuildDone(call=call, ok=True, done=reply.done, checkpoints=built)


WorkerCall = (
    HostCall
    | ReleaseCall
    | CheckpointCall
    | WarmCall
    | UnwarmCall
    | CutCall
    | BuildCall
    | PipelineBuildCall
)


# --- results of worker calls (what the executor feeds back) ---------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HostDone:
    call: HostCall
    ok: bool
    # The worker's error code when it answered one (say "checkpoint_unavailable").
    code: str | None = None
    message: str = ""
    # How a call that failed was answered: for the shell's log, not part of what it means.
    note: str = field(default="", compare=False)


class ReleaseOutcome(Enum):
    RELEASED = "released"  # 200: the source stopped; `checkpoint` is its final one (or None)
    REFUSED = "refused"  # 409: the source does not hold this epoch; hand off anyway
    FAILED = "failed"  # anything else: retry later


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseDone:
    call: ReleaseCall
    outcome: ReleaseOutcome
    checkpoint: FinalCheckpoint | None = None
    note: str = field(default="", compare=False)
    # Why the checkpoint the reply named was refused (the shell logs it as a warning).
    fenced: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointDone:
    call: CheckpointCall
    ok: bool
    note: str = field(default="", compare=False)


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
    note: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnwarmDone:
    # Either way the call is over: a copy left behind idles out on the worker.
    call: UnwarmCall
    ok: bool
    note: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CutDone:
    call: CutCall
    # 200 with done: the checkpoint at exactly the cut is written (`offset`, `uri`); 200
    # without: ask again; not ok: the worker refused or failed (the next plan asks again).
    ok: bool
    done: bool = False
    offset: int = 0
    uri: str = ""
    note: str = field(default="", compare=False)
    fenced: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildDone:
    call: BuildCall | PipelineBuildCall
    ok: bool
    done: bool = False
    checkpoints: tuple[BuiltCheckpoint, ...] = ()
    note: str = field(default="", compare=False)
    fenced: str = field(default="", compare=False)


WorkerResult = HostDone | ReleaseDone | CheckpointDone | WarmDone | UnwarmDone | CutDone | BuildDone


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
    if isinstance(call, UnwarmCall):
        return ("unwarm", call.migration_id)
    if isinstance(call, PipelineCutCall):
        return ("pcut", call.partition)  # a number: one partition of one pipeline
    if isinstance(call, CutCall):
        return ("cut", call.partition)
    if isinstance(call, PipelineBuildCall):
        return ("pbuild", (call.pipeline, call.generation))
    if isinstance(call, BuildCall):
        return ("build", call.generation)
    return ("checkpoint", call.worker_id)
