"""The one translation between the planner's calls and the wire
(coordinator/service/call_results.py): each call becomes its request, and each answer the
planner's result, with every checkpoint a reply names fenced to its canonical object. The
wire shapes themselves are tests/unit/test_worker_calls.py's and test_rescale_calls.py's."""

from __future__ import annotations

import pytest

from coordinator.core.commands import BuiltCheckpoint, FinalCheckpoint
from coordinator.core.effects import (
    INVALID_REPLY,
    BuildCall,
    BuildDone,
    CheckpointCall,
    CheckpointDone,
    CutCall,
    CutDone,
    HostCall,
    HostDone,
    ReleaseCall,
    ReleaseDone,
    ReleaseOutcome,
    UnwarmCall,
    UnwarmDone,
    WarmCall,
    WarmDone,
)
from coordinator.core.model import Checkpoint, Epoch, MigrationId, PartitionId, WorkerId
from coordinator.service.call_results import (
    request_of,
    result_of,
    store_fence,
)
from coordinator.service.worker_client import outcome_of
from shared.checkpoint_ref import canonical_uri
from shared.messages.checkpoint import CheckpointRequest
from shared.messages.common import Answer, ErrorReply, JsonObject, Outcome, SentCheckpoint
from shared.messages.host import HostRequest
from shared.messages.release import ReleasedCheckpoint, ReleaseReply, ReleaseRequest
from shared.messages.rescale import BuildReply, BuildRequest, CutCheckpoint, CutReply, CutRequest
from shared.messages.rescale import BuiltCheckpoint as BuiltCheckpointSent
from shared.messages.warm import UnwarmReply, UnwarmRequest, WarmReply, WarmRequest

STORE = "s3://bucket/cp"
FENCE = store_fence(STORE)
CUT = CutRequest(partition=3, epoch=2, generation=0, partitions=6, routing=(4,))
BUILD = BuildRequest(
    generation=1,
    routing=(4, 6),
    epoch=3,
    cuts=(CutCheckpoint(partition=0, offset=9, uri="//c0", epoch=2),),
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
HOST_CALL = HostCall(
    partition=PartitionId(2),
    epoch=Epoch(5),
    worker_id=WorkerId("w1"),
    address="http://w1",
    incarnation=1,
    checkpoint=Checkpoint(offset=7, uri="u", epoch=Epoch(4), at_ms=1),
    routing=(4,),
)
RELEASE_CALL = ReleaseCall(
    migration_id=MigrationId("m-1"),
    partition=PartitionId(2),
    epoch=Epoch(5),
    worker_id=WorkerId("w1"),
    address="http://w1",
    incarnation=1,
)
WARM_CALL = WarmCall(
    migration_id=MigrationId("m-1"),
    partition=PartitionId(2),
    worker_id=WorkerId("w2"),
    address="http://w2",
    incarnation=1,
    checkpoint=None,
)
CHECKPOINT_CALL = CheckpointCall(worker_id=WorkerId("w1"), address="http://w1", incarnation=1)


def ok(body: JsonObject) -> Answer:
    return Answer(outcome=Outcome.OK, body=body)


def test_each_call_becomes_its_request() -> None:
    assert request_of(HOST_CALL, warm_hold_s=1.0) == HostRequest(
        partition=2, epoch=5, checkpoint=SentCheckpoint(offset=7, uri="u", epoch=4), routing=(4,)
    )
    assert request_of(RELEASE_CALL, warm_hold_s=1.0) == ReleaseRequest(
        partition=2, epoch=5, migration_id="m-1"
    )
    assert request_of(WARM_CALL, warm_hold_s=2.5) == WarmRequest(
        partition=2, migration_id="m-1", checkpoint=None, routing=None, hold_s=2.5
    )
    assert request_of(CUT_CALL, warm_hold_s=1.0) == CUT
    assert request_of(BUILD_CALL, warm_hold_s=1.0) == BUILD
    assert request_of(CHECKPOINT_CALL, warm_hold_s=1.0) == CheckpointRequest()


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, Outcome.OK), (202, Outcome.OK), (409, Outcome.STALE), (503, Outcome.REFUSED)],
)
def test_an_http_status_is_an_outcome(status: int, outcome: Outcome) -> None:
    assert outcome_of(status) is outcome


def test_a_host_answer_becomes_its_result() -> None:
    assert result_of(HOST_CALL, ok({"partition": 2}), FENCE) == HostDone(call=HOST_CALL, ok=True)
    error = ErrorReply(error="checkpoint_unavailable", message="gone").to_json()
    failed = result_of(HOST_CALL, Answer(outcome=Outcome.REFUSED, body=error), FENCE)
    assert failed == HostDone(
        call=HOST_CALL, ok=False, code="checkpoint_unavailable", message="gone"
    )
    unreachable = Answer(outcome=Outcome.UNREACHABLE, body={"message": "timed out"})
    assert result_of(HOST_CALL, unreachable, FENCE) == HostDone(
        call=HOST_CALL, ok=False, message="timed out"
    )


def test_a_release_answer_becomes_its_result_with_a_fenced_checkpoint() -> None:
    uri = canonical_uri(STORE, 2, 5, 40)
    reply = ReleaseReply(
        partition=2, epoch=5, checkpoint=ReleasedCheckpoint(offset=40, uri=uri)
    ).to_json()
    assert result_of(RELEASE_CALL, ok(reply), FENCE) == ReleaseDone(
        call=RELEASE_CALL,
        outcome=ReleaseOutcome.RELEASED,
        checkpoint=FinalCheckpoint(offset=40, uri=uri, epoch=5),
    )
    # Another object, or none well-formed: released, handing off the last accepted one.
    for body in [{**reply, "checkpoint": {"offset": 40, "uri": "s3://x/y"}}, {}]:
        assert result_of(RELEASE_CALL, ok(body), FENCE) == ReleaseDone(
            call=RELEASE_CALL, outcome=ReleaseOutcome.RELEASED
        )
    stale = Answer(outcome=Outcome.STALE, body={})
    assert result_of(RELEASE_CALL, stale, FENCE).outcome is ReleaseOutcome.REFUSED  # type: ignore[union-attr]
    for outcome in (Outcome.REFUSED, Outcome.UNREACHABLE):
        failed = result_of(RELEASE_CALL, Answer(outcome=outcome, body={}), FENCE)
        assert failed == ReleaseDone(call=RELEASE_CALL, outcome=ReleaseOutcome.FAILED)


def test_a_warm_answer_becomes_its_result() -> None:
    reply = WarmReply(partition=2, loaded=True, offset=7, head=9).to_json()
    assert result_of(WARM_CALL, ok(reply), FENCE) == WarmDone(
        call=WARM_CALL, ok=True, loaded=True, offset=7, head=9
    )
    refused = Answer(outcome=Outcome.STALE, body=ErrorReply(error="hosted", message="").to_json())
    assert result_of(WARM_CALL, refused, FENCE) == WarmDone(call=WARM_CALL, ok=False, code="hosted")
    # A refusal without a code still goes cold; no answer leaves it to the target's liveness.
    bare = result_of(WARM_CALL, Answer(outcome=Outcome.REFUSED, body={}), FENCE)
    assert bare == WarmDone(call=WARM_CALL, ok=False, code="refused")
    assert result_of(WARM_CALL, ok({"x": 1}), FENCE) == WarmDone(
        call=WARM_CALL, ok=False, code=INVALID_REPLY
    )
    silent = Answer(outcome=Outcome.UNREACHABLE, body={"message": "reset"})
    assert result_of(WARM_CALL, silent, FENCE) == WarmDone(call=WARM_CALL, ok=False)


def test_a_checkpoint_answer_becomes_its_result() -> None:
    assert result_of(CHECKPOINT_CALL, ok({"scheduled": True}), FENCE) == CheckpointDone(
        call=CHECKPOINT_CALL, ok=True
    )
    failed = result_of(CHECKPOINT_CALL, Answer(outcome=Outcome.REFUSED, body={}), FENCE)
    assert failed == CheckpointDone(call=CHECKPOINT_CALL, ok=False)


def test_a_cut_answer_becomes_its_result() -> None:
    uri = canonical_uri(STORE, 3, 2, 40)
    reply = CutReply(partition=3, epoch=2, offset=40, done=True, uri=uri).to_json()
    assert result_of(CUT_CALL, ok(reply), FENCE) == CutDone(
        call=CUT_CALL, ok=True, done=True, offset=40, uri=uri
    )
    pending = {**reply, "done": False, "uri": None}
    assert result_of(CUT_CALL, ok(pending), FENCE) == CutDone(
        call=CUT_CALL, ok=True, done=False, offset=40, uri=""
    )
    bad = [ok({**reply, "epoch": 1}), Answer(outcome=Outcome.STALE, body=reply), ok({"x": 1})]
    bad.append(ok({**reply, "uri": "s3://elsewhere/x"}))  # not the canonical object
    for answer in bad:
        assert result_of(CUT_CALL, answer, FENCE) == CutDone(call=CUT_CALL, ok=False)


def test_a_build_answer_becomes_its_result() -> None:
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
    done = result_of(BUILD_CALL, ok(reply), FENCE)
    assert isinstance(done, BuildDone) and done.ok and done.done
    assert done.checkpoints[5] == BuiltCheckpoint(
        partition=5, offset=1 << 40, uri=canonical_uri(STORE, 5, 3, 1 << 40)
    )
    elsewhere = {**reply, "checkpoints": [{"partition": 0, "offset": 1, "uri": "s3://x/y"}]}
    for answer in [Answer(outcome=Outcome.REFUSED, body={}), ok(elsewhere)]:
        assert result_of(BUILD_CALL, answer, FENCE) == BuildDone(call=BUILD_CALL, ok=False)


def test_a_failed_call_is_logged_and_a_fenced_checkpoint_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="coordinator.service.call_results")
    error = ErrorReply(error="checkpoint_unavailable", message="store down").to_json()
    result_of(HOST_CALL, Answer(outcome=Outcome.REFUSED, body=error), FENCE)
    (failed,) = caplog.records
    assert failed.levelname == "INFO" and "refused: store down" in failed.getMessage()
    caplog.clear()
    elsewhere = {"partition": 2, "epoch": 5, "checkpoint": {"offset": 40, "uri": "s3://x/y"}}
    result_of(RELEASE_CALL, ok(elsewhere), FENCE)
    (warned,) = caplog.records
    assert warned.levelname == "WARNING" and "'s3://x/y' fenced" in warned.getMessage()


def test_an_unwarm_call_and_its_answer() -> None:
    call = UnwarmCall(
        migration_id=MigrationId("m-1"),
        partition=PartitionId(2),
        worker_id=WorkerId("w2"),
        address="http://w2",
        incarnation=1,
    )
    assert request_of(call, warm_hold_s=1.0) == UnwarmRequest(partition=2, migration_id="m-1")
    dropped = UnwarmReply(partition=2, dropped=True).to_json()
    assert result_of(call, ok(dropped), FENCE) == UnwarmDone(call=call, ok=True)
    silent = Answer(outcome=Outcome.UNREACHABLE, body={})
    assert result_of(call, silent, FENCE) == UnwarmDone(call=call, ok=False)
