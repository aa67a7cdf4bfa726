"""The one translation between the planner's worker calls and the wire: a `WorkerCall`
becomes its request (`request_of`), and the worker's answer becomes the planner's
`WorkerResult` (`result_of`).

The leader's HTTP client (`coordinator/service/worker_client.py`), the simulation and the
planner's scenario interpreter all go through these two functions, so what a reply means
to the planner is decided here and nowhere else. An answer is transport-neutral: how the
worker answered (`Outcome`) and the JSON object it sent, so a driver without HTTP makes the
same answers. Every checkpoint a reply names passes the `Fence` (in the leader: it must be
the canonical object of its partition, epoch and offset in the cluster's store, as a
reported checkpoint must), so a worker cannot make the state record an object it chose.
Invariant: a malformed reply, a fenced checkpoint, a refusal or no answer is never a
success; the planner asks again or takes the failure path. No I/O but logging.
"""

from __future__ import annotations

import functools
import logging

from coordinator.core.commands import BuiltCheckpoint, FinalCheckpoint
from coordinator.core.effects import (
    BuildCall,
    BuildDone,
    CheckpointDone,
    CutCall,
    CutDone,
    HostCall,
    HostDone,
    ReleaseCall,
    ReleaseDone,
    ReleaseOutcome,
    WarmCall,
    WarmDone,
    WorkerCall,
    WorkerResult,
)
from coordinator.core.model import Checkpoint
from shared.checkpoint_ref import reference_problem
from shared.messages.checkpoint import CheckpointRequest
from shared.messages.common import Answer, ErrorReply, Fence, Outcome, SentCheckpoint, WorkerRequest
from shared.messages.host import HostRequest
from shared.messages.release import ReleaseReply, ReleaseRequest
from shared.messages.rescale import BuildReply, BuildRequest, CutCheckpoint, CutReply, CutRequest
from shared.messages.warm import WarmReply, WarmRequest

__all__ = [
    "INVALID_REPLY",
    "Answer",
    "Fence",
    "Outcome",
    "request_of",
    "result_of",
    "store_fence",
]

log = logging.getLogger(__name__)

# A warm-up's code when the worker answered 200 with a body that is not a WarmReply.
INVALID_REPLY = "invalid_reply"


def store_fence(store: str) -> Fence:
    """The leader's fence: a checkpoint must be its canonical object in `store`."""
    return functools.partial(reference_problem, store)


def _sent(ck: Checkpoint | None) -> SentCheckpoint | None:
    return None if ck is None else SentCheckpoint(offset=ck.offset, uri=ck.uri, epoch=ck.epoch)


def request_of(call: WorkerCall, *, warm_hold_s: float) -> WorkerRequest:
    """The request that makes `call`; a warm call asks the target to hold its answer up to
    `warm_hold_s` for the copy's next step (`WarmRequest.hold_s`)."""
    if isinstance(call, HostCall):
        return HostRequest(
            partition=call.partition,
            epoch=call.epoch,
            checkpoint=_sent(call.checkpoint),
            routing=call.routing or None,
        )
    if isinstance(call, ReleaseCall):
        return ReleaseRequest(
            partition=call.partition, epoch=call.epoch, migration_id=call.migration_id
        )
    if isinstance(call, WarmCall):
        return WarmRequest(
            partition=call.partition,
            migration_id=call.migration_id,
            checkpoint=_sent(call.checkpoint),
            routing=call.routing or None,
            hold_s=warm_hold_s,
        )
    if isinstance(call, CutCall):
        return CutRequest(
            partition=call.partition,
            epoch=call.epoch,
            generation=call.generation,
            partitions=call.partitions,
            routing=call.routing,
        )
    if isinstance(call, BuildCall):
        return BuildRequest(
            generation=call.generation,
            routing=call.routing,
            epoch=call.epoch,
            cuts=tuple(
                CutCheckpoint(partition=p, offset=c.offset, uri=c.uri, epoch=c.epoch)
                for p, c in call.cuts
            ),
        )
    return CheckpointRequest()


def result_of(call: WorkerCall, answer: Answer, fence: Fence) -> WorkerResult:
    """What `answer` to `call` means to the planner."""
    if isinstance(call, HostCall):
        return _host(call, answer)
    if isinstance(call, ReleaseCall):
        return _release(call, answer, fence)
    if isinstance(call, WarmCall):
        return _warm(call, answer)
    if isinstance(call, CutCall):
        return _cut(call, answer, fence)
    if isinstance(call, BuildCall):
        return _build(call, answer, fence)
    return CheckpointDone(call=call, ok=answer.outcome is Outcome.OK)


def _host(call: HostCall, answer: Answer) -> HostDone:
    ok = answer.outcome is Outcome.OK
    error = ErrorReply.from_json(answer.body)
    if not ok:
        log.info(
            "host p%d e%d on %s failed (%s %s)",
            call.partition,
            call.epoch,
            call.worker_id,
            answer.outcome.value,
            error.message,
        )
    return HostDone(call=call, ok=ok, code=error.error or None, message=error.message)


def _release(call: ReleaseCall, answer: Answer, fence: Fence) -> ReleaseDone:
    if answer.outcome is Outcome.STALE:
        # The source does not hold this epoch (restarted, or never hosted it).
        return ReleaseDone(call=call, outcome=ReleaseOutcome.REFUSED)
    if answer.outcome is not Outcome.OK:
        log.info(
            "release %s of p%d failed (%s)", call.migration_id, call.partition, answer.outcome.value
        )
        return ReleaseDone(call=call, outcome=ReleaseOutcome.FAILED)
    # A reply without a well-formed checkpoint, or one the fence refuses, hands off with the
    # last accepted checkpoint: the new owner replays the source from there, which loses
    # nothing (replay is deterministic).
    final = None
    ck = ReleaseReply.checkpoint_of(answer.body)
    if ck is not None:
        problem = fence(call.partition, call.epoch, ck.offset, ck.uri)
        if problem is None:
            final = FinalCheckpoint(offset=ck.offset, uri=ck.uri, epoch=call.epoch)
        else:
            log.warning(
                "release of p%d by %s named checkpoint %r: fenced (%s)",
                call.partition,
                call.worker_id,
                ck.uri,
                problem,
            )
    return ReleaseDone(call=call, outcome=ReleaseOutcome.RELEASED, checkpoint=final)


def _warm(call: WarmCall, answer: Answer) -> WarmDone:
    reply = WarmReply.from_json(answer.body) if answer.outcome is Outcome.OK else None
    if reply is not None:
        return WarmDone(
            call=call, ok=True, loaded=reply.loaded, offset=reply.offset, head=reply.head
        )
    if answer.outcome is Outcome.UNREACHABLE:
        return WarmDone(call=call, ok=False)  # unreachable: its liveness decides
    error = ErrorReply.from_json(answer.body)
    code = INVALID_REPLY if answer.outcome is Outcome.OK else error.error or answer.outcome.value
    log.info(
        "warm-up %s of p%d on %s refused (%s %s): the move goes cold",
        call.migration_id,
        call.partition,
        call.worker_id,
        code,
        error.message,
    )
    return WarmDone(call=call, ok=False, code=code)


def _cut(call: CutCall, answer: Answer, fence: Fence) -> CutDone:
    reply = CutReply.from_json(answer.body) if answer.outcome is Outcome.OK else None
    if reply is None or (reply.partition, reply.epoch) != (call.partition, call.epoch):
        log.info(
            "cut of p%d e%d on %s: %s",
            call.partition,
            call.epoch,
            call.worker_id,
            answer.outcome.value,
        )
        return CutDone(call=call, ok=False)
    if reply.done:
        problem = fence(call.partition, call.epoch, reply.offset, reply.uri or "")
        if problem is not None:
            log.warning("cut of p%d by %s: %s", call.partition, call.worker_id, problem)
            return CutDone(call=call, ok=False)
    return CutDone(call=call, ok=True, done=reply.done, offset=reply.offset, uri=reply.uri or "")


def _build(call: BuildCall, answer: Answer, fence: Fence) -> BuildDone:
    reply = BuildReply.from_json(answer.body) if answer.outcome is Outcome.OK else None
    if reply is None or reply.generation != call.generation:
        log.info(
            "build of generation %d on %s: %s",
            call.generation,
            call.worker_id,
            answer.outcome.value,
        )
        return BuildDone(call=call, ok=False)
    for c in reply.checkpoints:
        problem = fence(c.partition, call.epoch, c.offset, c.uri)
        if problem is not None:
            log.warning("build of g%d by %s: %s", call.generation, call.worker_id, problem)
            return BuildDone(call=call, ok=False)
    built = tuple(
        BuiltCheckpoint(partition=c.partition, offset=c.offset, uri=c.uri)
        for c in reply.checkpoints
    )
    return BuildDone(call=call, ok=True, done=reply.done, checkpoints=built)
