"""The rescale's worker calls: the wire types (shared/worker_calls.py) read exactly what they
write and refuse the rest, and the leader's translation (coordinator/service/rescale_calls.py)
turns replies into results, a malformed or failed one into a result that is not done."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.core.commands import BuiltCheckpoint
from coordinator.core.effects import BuildCall, BuildDone, CutCall, CutDone, WorkerCall
from coordinator.core.model import Checkpoint, Epoch, PartitionId, WorkerId
from coordinator.service.rescale_calls import rescale_call
from shared.worker_calls import (
    BUILD_ROUTE,
    BuildReply,
    BuildRequest,
    BuiltCheckpointReply,
    CutCheckpoint,
    CutReply,
    CutRequest,
    HostRequest,
    InvalidCallBody,
    JsonObject,
    SentCheckpoint,
    WarmRequest,
    WorkerRequest,
)

CUT = CutRequest(partition=3, epoch=2, generation=0, partitions=6, routing=(4,))
BUILD = BuildRequest(
    generation=1,
    routing=(4, 6),
    epoch=3,
    cuts=tuple(CutCheckpoint(partition=p, offset=9, uri=f"//c{p}", epoch=2) for p in range(4)),
)


def test_requests_read_what_they_write() -> None:
    assert CUT.path == "/v1/partitions/3/cut" and BUILD.path == BUILD_ROUTE
    assert CutRequest.from_json(3, CUT.to_json()) == CUT
    assert BuildRequest.from_json(BUILD.to_json()) == BUILD
    host = HostRequest(partition=1, epoch=2, checkpoint=None, routing=(4, 6))
    assert HostRequest.from_json(1, host.to_json()) == host
    plain = HostRequest(partition=1, epoch=2, checkpoint=SentCheckpoint(offset=1, uri="u", epoch=1))
    assert "routing" not in plain.to_json() and HostRequest.from_json(1, plain.to_json()) == plain
    warm = WarmRequest(partition=1, migration_id="m-1", checkpoint=None, routing=(4,))
    assert WarmRequest.from_json(1, warm.to_json()) == warm


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**CUT.to_json(), "epoch": 0}, "epoch"),
        ({**CUT.to_json(), "partitions": 0}, "partitions"),
        ({**CUT.to_json(), "partitions": 65_537}, "partitions"),
        ({**CUT.to_json(), "routing": [4, 6]}, "routing"),  # not generations 0..0
        ({**CUT.to_json(), "routing": []}, "routing"),
        ({**CUT.to_json(), "routing": [True]}, "routing"),
        ({**CUT.to_json(), "generation": -1}, "generation"),
    ],
)
def test_a_bad_cut_request_names_its_field(body: JsonObject, field: str) -> None:
    with pytest.raises(InvalidCallBody) as info:
        CutRequest.from_json(3, body)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BUILD.to_json(), "routing": [4]}, "routing"),
        ({**BUILD.to_json(), "routing": [4, 70_000]}, "routing"),
        ({**BUILD.to_json(), "cuts": [{"partition": 0}]}, "cuts"),
        ({**BUILD.to_json(), "cuts": "all"}, "cuts"),
        ({**BUILD.to_json(), "epoch": "3"}, "epoch"),
        ([], "body"),
    ],
)
def test_a_bad_build_request_names_its_field(body: object, field: str) -> None:
    with pytest.raises(InvalidCallBody) as info:
        BuildRequest.from_json(body)
    assert info.value.field == field


def test_replies_read_what_they_write_and_none_for_junk() -> None:
    cut = CutReply(partition=3, epoch=2, offset=40, done=True, uri="//c3")
    assert CutReply.from_json(cut.to_json()) == cut
    pending = CutReply(partition=3, epoch=2, offset=40, done=False, uri=None)
    assert CutReply.from_json(pending.to_json()) == pending
    assert CutReply.from_json({**cut.to_json(), "uri": None}) is None  # done needs its uri
    assert CutReply.from_json({**cut.to_json(), "offset": True}) is None
    assert CutReply.from_json([]) is None
    built = BuildReply(
        generation=1,
        done=True,
        checkpoints=(BuiltCheckpointReply(partition=0, offset=1 << 40, uri="//n0"),),
    )
    assert BuildReply.from_json(built.to_json()) == built
    assert BuildReply.from_json({**built.to_json(), "checkpoints": [{"partition": 0}]}) is None
    assert BuildReply.from_json({**built.to_json(), "done": "yes"}) is None


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
    reply = CutReply(partition=3, epoch=2, offset=40, done=True, uri="//c3").to_json()
    sent, post = answering(200, reply)
    done = asyncio.run(rescale_call(post, CUT_CALL))  # type: ignore[arg-type]
    assert sent == [CUT]
    assert done == CutDone(call=CUT_CALL, ok=True, done=True, offset=40, uri="//c3")
    for status, body in [(200, {**reply, "epoch": 1}), (409, reply), (200, {"x": 1})]:
        _, post = answering(status, body)
        assert asyncio.run(rescale_call(post, CUT_CALL)) == CutDone(call=CUT_CALL, ok=False)  # type: ignore[arg-type]


def test_a_build_reply_becomes_its_result() -> None:
    reply = BuildReply(
        generation=1,
        done=True,
        checkpoints=tuple(
            BuiltCheckpointReply(partition=q, offset=1 << 40, uri=f"//n{q}") for q in range(6)
        ),
    ).to_json()
    sent, post = answering(200, reply)
    done = asyncio.run(rescale_call(post, BUILD_CALL))  # type: ignore[arg-type]
    (request,) = sent
    assert isinstance(request, BuildRequest) and request.epoch == 3
    assert request.cuts == (CutCheckpoint(partition=0, offset=9, uri="//c0", epoch=2),)
    assert isinstance(done, BuildDone) and done.ok and done.done
    assert done.checkpoints[5] == BuiltCheckpoint(partition=5, offset=1 << 40, uri="//n5")
    _, post = answering(503, {})
    assert asyncio.run(rescale_call(post, BUILD_CALL)) == BuildDone(call=BUILD_CALL, ok=False)  # type: ignore[arg-type]
