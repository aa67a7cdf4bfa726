"""The coordinator's replies as the worker reads them (`pipeline/coordinator_replies.py`):
typed values, or a ClientError naming the field, which the worker's loops retry like a
failed request."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipeline.coordinator_replies import (
    CheckpointVerdict,
    HeartbeatReply,
    Registration,
    checkpoint_verdicts,
    partition_owner,
    total_partitions,
)
from shared.errors import ClientError

REGISTRATION = {
    "worker_id": "w1",
    "incarnation": 3,
    "token": "w1.3.t",
    "call_token": "3.c",
    "heartbeat_interval_s": 1,
    "lease_s": 7.5,
}


def test_well_formed_replies_read_into_values() -> None:
    assert Registration.from_json(REGISTRATION) == Registration(
        token="w1.3.t", call_token="3.c", incarnation=3, heartbeat_interval_s=1.0, lease_s=7.5
    )
    beat = {
        "generation": 9,
        "assignment": [{"partition": 2, "epoch": 4}, {"partition": 5, "epoch": 1}],
        "checkpoint_due": True,
        "token": "w1.3.u",
    }
    assert HeartbeatReply.from_json(beat) == HeartbeatReply(
        assignment={2: 4, 5: 1}, checkpoint_due=True, token="w1.3.u"
    )
    quiet = HeartbeatReply.from_json({"assignment": []})
    assert quiet == HeartbeatReply(assignment={}, checkpoint_due=False, token=None)
    results = {
        "results": [
            {"partition": 1, "status": "accepted"},
            {"partition": 2, "status": "fenced", "reason": "stale epoch"},
        ]
    }
    assert checkpoint_verdicts(results) == [
        CheckpointVerdict(partition=1, fenced=False, reason=""),
        CheckpointVerdict(partition=2, fenced=True, reason="stale epoch"),
    ]
    assert total_partitions({"cluster": {"total_partitions": 12}}) == 12
    assert partition_owner({"owner": "w2"}) == "w2"
    assert partition_owner({"owner": None}) is None


@pytest.mark.parametrize(
    ("read", "body", "field"),
    [
        (Registration.from_json, {**REGISTRATION, "token": None}, "token"),
        (Registration.from_json, {**REGISTRATION, "incarnation": "3"}, "incarnation"),
        (Registration.from_json, {**REGISTRATION, "incarnation": True}, "incarnation"),
        (Registration.from_json, {**REGISTRATION, "lease_s": "7"}, "lease_s"),
        (HeartbeatReply.from_json, {}, "assignment"),
        (HeartbeatReply.from_json, {"assignment": [{"partition": 1}]}, "epoch"),
        (HeartbeatReply.from_json, {"assignment": [3]}, "assignment"),
        (checkpoint_verdicts, {"results": [{"partition": 1}]}, "status"),
        (total_partitions, {"cluster": None}, "cluster"),
        (total_partitions, {"cluster": {"total_partitions": 1.5}}, "total_partitions"),
    ],
)
def test_a_malformed_reply_is_a_client_error_naming_the_field(
    read: Callable[[dict[str, object]], object], body: dict[str, object], field: str
) -> None:
    with pytest.raises(ClientError) as info:
        read(body)
    assert info.value.code == "invalid_reply" and info.value.field == field


def test_the_worker_reads_what_the_coordinators_reply_declarations_write() -> None:
    """The replies are declared once (`shared/messages/session.py`, the coordinator answers
    with them); the worker reads the fields it needs from exactly what they serialize."""
    from shared.messages.session import (
        AssignmentEntry,
        CheckpointResult,
        CheckpointsResponse,
        HeartbeatResponse,
        RegisterResponse,
    )

    registered = RegisterResponse(
        worker_id="w1",
        incarnation=3,
        token="w1.3.t",
        token_expires_at_ms=5,
        call_token="3.c",
        heartbeat_interval_s=1.0,
        lease_s=7.5,
    )
    assert Registration.from_json(registered.model_dump(mode="json")) == Registration(
        token="w1.3.t", call_token="3.c", incarnation=3, heartbeat_interval_s=1.0, lease_s=7.5
    )
    beat = HeartbeatResponse(
        generation=2,
        assignment=[AssignmentEntry(partition=4, epoch=2)],
        checkpoint_due=True,
        token="w1.3.u",
    )
    assert HeartbeatReply.from_json(beat.model_dump(mode="json")) == HeartbeatReply(
        assignment={4: 2}, checkpoint_due=True, token="w1.3.u"
    )
    results = CheckpointsResponse(
        results=[CheckpointResult(partition=1, status="fenced", reason="stale epoch")]
    )
    assert checkpoint_verdicts(results.model_dump(mode="json")) == [
        CheckpointVerdict(partition=1, fenced=True, reason="stale epoch")
    ]
