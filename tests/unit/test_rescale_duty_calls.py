"""The leader's side of the rescale's worker calls (coordinator/service/rescale_calls.py): a
reply becomes its result, a malformed or failed one a result that is not done. The wire types
themselves are tests/unit/test_rescale_calls.py's."""

from __future__ import annotations

import asyncio

from coordinator.core.commands import BuiltCheckpoint
from coordinator.core.effects import BuildCall, BuildDone, CutCall, CutDone, WorkerCall
from coordinator.core.model import Checkpoint, Epoch, PartitionId, WorkerId
from coordinator.service.rescale_calls import rescale_call
from shared.checkpoint_ref import canonical_uri
from shared.worker_calls import (
    BuildReply,
    BuildRequest,
    CutCheckpoint,
    CutReply,
    CutRequest,
    JsonObject,
    WorkerRequest,
)
from shared.worker_calls import (
    BuiltCheckpoint as BuiltCheckpointSent,
)

STORE = "s3://bucket/cp"
CUT = CutRequest(partition=3, epoch=2, generation=0, partitions=6, routing=(4,))
BUILD = BuildRequest(
    generation=1,
    routing=(4, 6),
    epoch=3,
    cuts=tuple(CutCheckpoint(partition=p, offset=9, uri=f"//c{p}", epoch=2) for p in range(4)),
)


CUT_CALL = CutCall(
    partition=PartitionId(3),
    epoch=Epoch(2),
    worker_id=WorkerId("w1"),
    address="http://w1",
    incarnation=1,
    generation=0,
    partitions=6,
    routing=(4,),
)
BUILD_CALL = BuildCall(
    generation=1,
    worker_id=WorkerId("w2"),
    address="http://w2",
    incarnation=1,
    routing=(4, 6),
    epoch=Epoch(3),
    cuts=((PartitionId(0), Checkpoint(offset=9, uri="//c0", epoch=Epoch(2), at_ms=5)),),
)


def answering(status: int, body: JsonObject) -> tuple[list[WorkerRequest], object]:
    sent: list[WorkerRequest] = []

    async def post(_call: WorkerCall, request: WorkerRequest) -> tuple[int, JsonObject]:
        sent.append(request)
        return status, body

    return sent, post


def test_a_cut_reply_becomes_its_result() -> None:
    uri = canonical_uri(STORE, 3, 2, 40)
    reply = CutReply(partition=3, epoch=2, offset=40, done=True, uri=uri).to_json()
    sent, post = answering(200, reply)
    done = asyncio.run(rescale_call(post, STORE, CUT_CALL))  # type: ignore[arg-type]
    assert sent == [CUT]
    assert done == CutDone(call=CUT_CALL, ok=True, done=True, offset=40, uri=uri)
    pending = {**reply, "done": False, "uri": None}
    _, post = answering(200, pending)
    assert asyncio.run(rescale_call(post, STORE, CUT_CALL)) == CutDone(  # type: ignore[arg-type]
        call=CUT_CALL, ok=True, done=False, offset=40, uri=""
    )
    bad = [(200, {**reply, "epoch": 1}), (409, reply), (200, {"x": 1})]
    bad.append((200, {**reply, "uri": "s3://elsewhere/x"}))  # not the canonical object
    for status, body in bad:
        _, post = answering(status, body)
        assert asyncio.run(rescale_call(post, STORE, CUT_CALL)) == CutDone(call=CUT_CALL, ok=False)  # type: ignore[arg-type]


def test_a_build_reply_becomes_its_result() -> None:
    reply = BuildReply(
        generation=1,
        done=True,
        checkpoints=tuple(
            BuiltCheckpointSent(
                partition=q, offset=1 << 40, uri=canonical_uri(STORE, q, 3, 1 << 40)
            )
            for q in range(6)
        ),
    ).to_json()
    sent, post = answering(200, reply)
    done = asyncio.run(rescale_call(post, STORE, BUILD_CALL))  # type: ignore[arg-type]
    (request,) = sent
    assert isinstance(request, BuildRequest) and request.epoch == 3
    assert request.cuts == (CutCheckpoint(partition=0, offset=9, uri="//c0", epoch=2),)
    assert isinstance(done, BuildDone) and done.ok and done.done
    assert done.checkpoints[5] == BuiltCheckpoint(
        partition=5, offset=1 << 40, uri=canonical_uri(STORE, 5, 3, 1 << 40)
    )
    elsewhere = {**reply, "checkpoints": [{"partition": 0, "offset": 1, "uri": "s3://x/y"}]}
    for status, body in [(503, {}), (200, elsewhere)]:
        _, post = answering(status, body)
        failed = asyncio.run(rescale_call(post, STORE, BUILD_CALL))  # type: ignore[arg-type]
        assert failed == BuildDone(call=BUILD_CALL, ok=False)
