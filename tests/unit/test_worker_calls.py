"""The leader -> worker call contract (`shared/messages/`): each body on the wire is
exactly the JSON the leader always sent, a request reads back as itself, and anything else
is refused naming the field (what a worker answers 400 with)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import ErrorKind
from shared.messages.checkpoint import CheckpointReply, CheckpointRequest
from shared.messages.common import (
    EPOCH_MAX,
    ErrorReply,
    InvalidCallBody,
    SentCheckpoint,
    authorization,
    authorized,
)
from shared.messages.host import HostReply, HostRequest
from shared.messages.release import ReleasedCheckpoint, ReleaseReply, ReleaseRequest
from shared.messages.warm import UnwarmReply, UnwarmRequest, WarmRequest

EPOCHS = st.integers(1, EPOCH_MAX)
OFFSETS = st.integers(0, 2**63 - 1)


def test_the_wire_shapes() -> None:
    sent = SentCheckpoint(offset=40, uri="file:///s/checkpoints/x.ckpt", epoch=1)
    host = HostRequest(partition=3, epoch=2, checkpoint=sent)
    assert host.path == "/v1/partitions/3/host"
    assert host.to_json() == {
        "epoch": 2,
        "checkpoint": {"offset": 40, "uri": "file:///s/checkpoints/x.ckpt", "epoch": 1},
    }
    assert HostRequest(partition=3, epoch=2).to_json() == {"epoch": 2, "checkpoint": None}
    assert HostReply(partition=3, epoch=2, offset=40).to_json() == {
        "partition": 3,
        "epoch": 2,
        "offset": 40,
    }
    release = ReleaseRequest(partition=3, epoch=2, migration_id="m-1")
    assert release.path == "/v1/partitions/3/release"
    assert release.to_json() == {"epoch": 2, "migration_id": "m-1"}
    final = ReleasedCheckpoint(offset=41, uri="u")
    assert ReleaseReply(partition=3, epoch=2, checkpoint=final).to_json() == {
        "partition": 3,
        "epoch": 2,
        "checkpoint": {"offset": 41, "uri": "u"},
    }
    assert CheckpointRequest.path == "/v1/checkpoint" and CheckpointRequest().to_json() == {}
    assert CheckpointReply().to_json() == {"scheduled": True}
    assert ErrorReply(error="stale_epoch", message="m", field="epoch").to_json() == {
        "error": "stale_epoch",
        "message": "m",
        "field": "epoch",
    }
    assert ErrorReply(error="unauthorized", message="m").to_json() == {
        "error": "unauthorized",
        "message": "m",
    }


@given(
    partition=st.integers(0, 999_999),
    epoch=EPOCHS,
    checkpoint=st.none()
    | st.builds(SentCheckpoint, offset=OFFSETS, uri=st.text(max_size=40), epoch=EPOCHS),
    migration_id=st.none() | st.text(max_size=20),
)
def test_requests_read_back_as_themselves(
    partition: int, epoch: int, checkpoint: SentCheckpoint | None, migration_id: str | None
) -> None:
    host = HostRequest(partition=partition, epoch=epoch, checkpoint=checkpoint)
    assert HostRequest.from_json(partition, host.to_json()) == host
    release = ReleaseRequest(partition=partition, epoch=epoch, migration_id=migration_id)
    assert ReleaseRequest.from_json(partition, release.to_json()) == release


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ("2", "body"),
        ({}, "epoch"),
        ({"epoch": 0}, "epoch"),
        ({"epoch": EPOCH_MAX + 1}, "epoch"),
        ({"epoch": True}, "epoch"),
        ({"epoch": "2"}, "epoch"),
        ({"epoch": 2.0}, "epoch"),
        ({"epoch": 2, "checkpoint": {}}, "checkpoint"),
        ({"epoch": 2, "checkpoint": {"offset": 1, "uri": "u"}}, "checkpoint"),
        ({"epoch": 2, "checkpoint": {"offset": True, "uri": "u", "epoch": 1}}, "checkpoint"),
        ({"epoch": 2, "checkpoint": {"offset": 1, "uri": 5, "epoch": 1}}, "checkpoint"),
        ({"epoch": 2, "checkpoint": "file:///x"}, "checkpoint"),
    ],
)
def test_a_bad_host_body_names_its_field(body: object, field: str) -> None:
    with pytest.raises(InvalidCallBody) as info:
        HostRequest.from_json(1, body)
    assert info.value.kind is ErrorKind.INVALID and info.value.field == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (None, "body"),
        ({"migration_id": "m"}, "epoch"),
        ({"epoch": False}, "epoch"),
        ({"epoch": -1}, "epoch"),
        ({"epoch": 2, "migration_id": 7}, "migration_id"),
    ],
)
def test_a_bad_release_body_names_its_field(body: object, field: str) -> None:
    with pytest.raises(InvalidCallBody) as info:
        ReleaseRequest.from_json(1, body)
    assert info.value.kind is ErrorKind.INVALID and info.value.field == field


def test_a_release_reply_names_a_checkpoint_only_when_well_formed() -> None:
    good = {"partition": 1, "epoch": 2, "checkpoint": {"offset": 5, "uri": "u"}}
    assert ReleaseReply.checkpoint_of(good) == ReleasedCheckpoint(offset=5, uri="u")
    bad_bodies: list[object] = [
        {},
        [],
        {"checkpoint": None},
        {"checkpoint": {"offset": "5", "uri": "u"}},
        {"checkpoint": {"offset": True, "uri": "u"}},
        {"checkpoint": {"offset": 5}},
    ]
    for bad in bad_bodies:
        assert ReleaseReply.checkpoint_of(bad) is None, bad


def test_error_replies_are_read_leniently() -> None:
    body = {"error": "checkpoint_unavailable", "message": "NoSuchKey", "field": None}
    assert ErrorReply.from_json(body) == ErrorReply(
        error="checkpoint_unavailable", message="NoSuchKey"
    )
    # A dropped connection is described without a code; a proxy's page is not an object.
    assert ErrorReply.from_json({"message": "refused"}) == ErrorReply(error="", message="refused")
    assert ErrorReply.from_json("<html>") == ErrorReply(error="", message="")
    assert ErrorReply.from_json({"error": 5, "message": ["x"]}) == ErrorReply(error="", message="")


def test_the_call_token_header() -> None:
    token = "7.abcdef"
    assert authorization(token) == "Bearer 7.abcdef"
    assert authorized("Bearer 7.abcdef", token)
    for header in ("", "Bearer 7.abcde", "bearer 7.abcdef", "Bearer 7.abcdef ", "Bearer \xe9"):
        assert not authorized(header, token), header
    # A worker that has not registered yet has no token and takes no call, even an empty one.
    assert not authorized("Bearer ", "") and not authorized("", "")


def test_a_warm_call_asks_for_a_hold_only_when_it_wants_one() -> None:
    """Without a hold the body is the JSON the leader always sent (a worker that predates
    `hold_s` ignores the field anyway); a hold reads back as itself."""
    plain = WarmRequest(partition=2, migration_id="m-1")
    assert plain.to_json() == {"migration_id": "m-1", "checkpoint": None}
    held = WarmRequest(partition=2, migration_id="m-1", hold_s=2.5)
    assert held.to_json() == {"migration_id": "m-1", "checkpoint": None, "hold_s": 2.5}
    assert WarmRequest.from_json(2, held.to_json()) == held
    assert WarmRequest.from_json(2, {"migration_id": "m-1", "hold_s": 10}).hold_s == 10.0


@pytest.mark.parametrize("hold", [-0.1, 10.5, "1", True, None, float("nan"), [1]])
def test_a_bad_hold_is_refused_naming_it(hold: object) -> None:
    with pytest.raises(InvalidCallBody) as info:
        WarmRequest.from_json(1, {"migration_id": "m", "hold_s": hold})
    assert info.value.kind is ErrorKind.INVALID and info.value.field == "hold_s"


def test_the_unwarm_call_on_the_wire() -> None:
    call = UnwarmRequest(partition=2, migration_id="m-1")
    assert call.path == "/v1/partitions/2/unwarm"
    assert call.to_json() == {"migration_id": "m-1"}
    assert UnwarmRequest.from_json(2, call.to_json()) == call
    assert UnwarmReply(partition=2, dropped=True).to_json() == {"partition": 2, "dropped": True}
    for body in ({}, {"migration_id": ""}, {"migration_id": 7}, {"migration_id": "m" * 65}):
        with pytest.raises(InvalidCallBody) as info:
            UnwarmRequest.from_json(2, body)
        assert info.value.field == "migration_id"
