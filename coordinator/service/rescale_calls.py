"""The leader's rescale calls to workers, sent and read (docs/pipeline.md, "Rescaling"):
a cut call to an old partition's owner, the build call to one worker.

Owns the translation between the planner's `CutCall`/`BuildCall` and the wire
(`shared/worker_calls.py`'s CutRequest/CutReply and BuildRequest/BuildReply) and back into
`CutDone`/`BuildDone`. A reply that is not well-formed, any status but 200, or no answer is
a result that is not done: the planner asks again after its poll interval
(`coordinator/core/rescale_plans.py`), since both calls are idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from coordinator.core.commands import BuiltCheckpoint
from coordinator.core.effects import BuildCall, BuildDone, CutCall, CutDone, WorkerCall
from shared.worker_calls import (
    STATUS_OK,
    BuildReply,
    BuildRequest,
    CutCheckpoint,
    CutReply,
    CutRequest,
    JsonObject,
    WorkerRequest,
)

__all__ = ["rescale_call"]

log = logging.getLogger(__name__)

Post = Callable[[WorkerCall, WorkerRequest], Awaitable[tuple[int, JsonObject]]]


async def rescale_call(post: Post, call: CutCall | BuildCall) -> CutDone | BuildDone:
    if isinstance(call, CutCall):
        return await _cut(post, call)
    return await _build(post, call)


async def _cut(post: Post, call: CutCall) -> CutDone:
    request = CutRequest(
        partition=call.partition,
        epoch=call.epoch,
        generation=call.generation,
        partitions=call.partitions,
        routing=call.routing,
    )
    status, body = await post(call, request)
    reply = CutReply.from_json(body) if status == STATUS_OK else None
    if reply is None or (reply.partition, reply.epoch) != (call.partition, call.epoch):
        log.info("cut of p%d e%d on %s: %s", call.partition, call.epoch, call.worker_id, status)
        return CutDone(call=call, ok=False)
    return CutDone(call=call, ok=True, done=reply.done, offset=reply.offset, uri=reply.uri or "")


async def _build(post: Post, call: BuildCall) -> BuildDone:
    request = BuildRequest(
        generation=call.generation,
        routing=call.routing,
        epoch=call.epoch,
        cuts=tuple(
            CutCheckpoint(partition=p, offset=c.offset, uri=c.uri, epoch=c.epoch)
            for p, c in call.cuts
        ),
    )
    status, body = await post(call, request)
    reply = BuildReply.from_json(body) if status == STATUS_OK else None
    if reply is None or reply.generation != call.generation:
        log.info("build of generation %d on %s: %s", call.generation, call.worker_id, status)
        return BuildDone(call=call, ok=False)
    built = tuple(
        BuiltCheckpoint(partition=c.partition, offset=c.offset, uri=c.uri)
        for c in reply.checkpoints
    )
    return BuildDone(call=call, ok=True, done=reply.done, checkpoints=built)
