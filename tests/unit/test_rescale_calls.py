"""The rescale's worker calls (`shared/messages/rescale.py`): cut and build, and the `routing`
a host or warm call may carry. Each request reads back as itself, anything else is refused
naming its field, and a malformed reply reads as None (the leader asks again)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import ErrorKind
from shared.messages.common import (
    EPOCH_MAX,
    GENERATION0_PARTITIONS_MAX,
    ROUTING_GENERATIONS_MAX,
    InvalidCallBody,
    SentCheckpoint,
)
from shared.messages.host import HostRequest
from shared.messages.rescale import (
    CUTS_MAX,
    BuildReply,
    BuildRequest,
    BuiltCheckpoint,
    CutCheckpoint,
    CutReply,
    CutRequest,
)
from shared.messages.warm import WarmRequest

EPOCHS = st.integers(1, EPOCH_MAX)
OFFSETS = st.integers(0, 2**63 - 1)


@st.composite
def routings(draw: st.DrawFn, generations: int | None = None) -> tuple[int, ...]:
    n = generations or draw(st.integers(1, 5))
    first = draw(st.integers(1, GENERATION0_PARTITIONS_MAX))
    return (first, *draw(st.lists(st.integers(1, 65_536), min_size=n - 1, max_size=n - 1)))


def test_the_wire_shapes() -> None:
    cut = CutRequest(partition=3, epoch=2, generation=0, partitions=5, routing=(4,))
    assert cut.path == "/v1/partitions/3/cut"
    assert cut.to_json() == {"epoch": 2, "generation": 0, "partitions": 5, "routing": [4]}
    reply = CutReply(partition=3, epoch=2, offset=40, done=True, uri="u")
    assert reply.to_json() == {"partition": 3, "epoch": 2, "offset": 40, "done": True, "uri": "u"}
    build = BuildRequest(
        generation=1,
        routing=(2, 3),
        epoch=7,
        cuts=(
            CutCheckpoint(partition=0, offset=10, uri="a", epoch=5),
            CutCheckpoint(partition=1, offset=12, uri="b", epoch=6),
        ),
    )
    assert BuildRequest.path == "/v1/rescale/build"
    assert build.to_json() == {
        "generation": 1,
        "routing": [2, 3],
        "epoch": 7,
        "cuts": [
            {"partition": 0, "offset": 10, "uri": "a", "epoch": 5},
            {"partition": 1, "offset": 12, "uri": "b", "epoch": 6},
        ],
    }
    built = BuildReply(
        generation=1,
        done=True,
        checkpoints=(BuiltCheckpoint(partition=0, offset=2**40, uri="c"),),
    )
    assert built.to_json() == {
        "generation": 1,
        "done": True,
        "checkpoints": [{"partition": 0, "offset": 2**40, "uri": "c"}],
    }
    # Without a rescale a host or warm call is the JSON it always was; with one it adds routing.
    assert "routing" not in HostRequest(partition=1, epoch=2).to_json()
    assert "routing" not in WarmRequest(partition=1, migration_id="m").to_json()
    assert HostRequest(partition=1, epoch=2, routing=(4, 6)).to_json()["routing"] == [4, 6]
    assert WarmRequest(partition=1, migration_id="m", routing=(4,)).to_json()["routing"] == [4]


@given(
    partition=st.integers(0, 999_999),
    epoch=EPOCHS,
    routing=routings(),
    partitions=st.integers(1, 65_536),
    checkpoint=st.none()
    | st.builds(SentCheckpoint, offset=OFFSETS, uri=st.text(max_size=20), epoch=EPOCHS),
)
def test_requests_read_back_as_themselves(
    partition: int,
    epoch: int,
    routing: tuple[int, ...],
    partitions: int,
    checkpoint: SentCheckpoint | None,
) -> None:
    cut = CutRequest(
        partition=partition,
        epoch=epoch,
        generation=len(routing) - 1,
        partitions=partitions,
        routing=routing,
    )
    assert CutRequest.from_json(partition, cut.to_json()) == cut
    host = HostRequest(partition=partition, epoch=epoch, checkpoint=checkpoint, routing=routing)
    assert HostRequest.from_json(partition, host.to_json()) == host
    warm = WarmRequest(partition=partition, migration_id="m-1", routing=routing)
    assert WarmRequest.from_json(partition, warm.to_json()) == warm
    if len(routing) >= 2:
        cuts = tuple(
            CutCheckpoint(partition=p, offset=p * 3, uri=f"u{p}", epoch=epoch)
            for p in range(min(routing[-2], 50))
        )
        old = (*routing[:-2], len(cuts), routing[-1])
        build = BuildRequest(generation=len(old) - 1, routing=old, epoch=epoch, cuts=cuts)
        assert BuildRequest.from_json(build.to_json()) == build


def test_build_cuts_are_read_in_partition_order() -> None:
    body = {
        "generation": 1,
        "routing": [2, 4],
        "epoch": 3,
        "cuts": [
            {"partition": 1, "offset": 5, "uri": "b", "epoch": 2},
            {"partition": 0, "offset": 4, "uri": "a", "epoch": 1},
        ],
    }
    assert [c.partition for c in BuildRequest.from_json(body).cuts] == [0, 1]


CUT_OK: dict[str, object] = {"epoch": 2, "generation": 1, "partitions": 5, "routing": [4, 8]}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"epoch": 0}, "epoch"),
        ({"epoch": True}, "epoch"),
        ({"epoch": None}, "epoch"),
        ({"generation": -1}, "generation"),
        ({"generation": "1"}, "generation"),
        ({"generation": False}, "generation"),
        ({"generation": ROUTING_GENERATIONS_MAX - 1}, "generation"),
        ({"partitions": 0}, "partitions"),
        ({"partitions": 65_537}, "partitions"),
        ({"partitions": 2.0}, "partitions"),
        ({"routing": None}, "routing"),
        ({"routing": []}, "routing"),
        ({"routing": [4]}, "routing"),  # one count short of generation 1
        ({"routing": [4, 8, 9]}, "routing"),
        ({"routing": [4, 0]}, "routing"),
        ({"routing": [0, 8]}, "routing"),
        ({"routing": [4, 65_537]}, "routing"),
        ({"routing": [4, True]}, "routing"),
        ({"routing": "4,8"}, "routing"),
    ],
)
def test_a_bad_cut_body_names_its_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidCallBody) as info:
        CutRequest.from_json(1, {**CUT_OK, **change})
    assert info.value.kind is ErrorKind.INVALID and info.value.field == field


def test_a_cut_body_that_is_no_object_is_refused() -> None:
    for body in ([], "x", None):
        with pytest.raises(InvalidCallBody) as info:
            CutRequest.from_json(1, body)
        assert info.value.field == "body"


def _cut(p: int, **change: object) -> dict[str, object]:
    return {"partition": p, "offset": 4, "uri": "u", "epoch": 1, **change}


BUILD_OK: dict[str, object] = {
    "generation": 1,
    "routing": [2, 4],
    "epoch": 3,
    "cuts": [_cut(0), _cut(1)],
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"generation": 0}, "generation"),
        ({"generation": None}, "generation"),
        ({"generation": ROUTING_GENERATIONS_MAX}, "generation"),
        ({"routing": [2]}, "routing"),
        ({"routing": [2, 4, 4]}, "routing"),
        ({"routing": [GENERATION0_PARTITIONS_MAX + 1, 4]}, "routing"),
        ({"epoch": 0}, "epoch"),
        ({"epoch": "3"}, "epoch"),
        ({"cuts": None}, "cuts"),
        ({"cuts": {}}, "cuts"),
        ({"cuts": [_cut(0)]}, "cuts"),  # partition 1 has no cut
        ({"cuts": [_cut(0), _cut(0)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(2)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(1), _cut(2)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(-1)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(1, offset=-1)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(1, offset=True)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(1, uri="")]}, "cuts"),
        ({"cuts": [_cut(0), _cut(1, uri=5)]}, "cuts"),
        ({"cuts": [_cut(0), _cut(1, epoch=0)]}, "cuts"),
        ({"cuts": [_cut(0), "u"]}, "cuts"),
    ],
)
def test_a_bad_build_body_names_its_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidCallBody) as info:
        BuildRequest.from_json({**BUILD_OK, **change})
    assert info.value.kind is ErrorKind.INVALID and info.value.field == field


def test_a_build_body_names_its_bounds() -> None:
    with pytest.raises(InvalidCallBody) as info:
        BuildRequest.from_json({**BUILD_OK, "cuts": [None] * (CUTS_MAX + 1)})
    assert info.value.field == "cuts" and str(CUTS_MAX) in str(info.value)
    with pytest.raises(InvalidCallBody) as info:
        BuildRequest.from_json([])
    assert info.value.field == "body"
    too_long = [1] * (ROUTING_GENERATIONS_MAX + 1)
    with pytest.raises(InvalidCallBody) as info:
        HostRequest.from_json(1, {"epoch": 2, "routing": too_long})
    assert info.value.field == "routing"


@pytest.mark.parametrize("routing", [[], [0], [4, 0], ["4"], [4, 65_537], 4, {"0": 4}, [1] * 65])
def test_a_bad_routing_on_host_or_warm_names_its_field(routing: object) -> None:
    with pytest.raises(InvalidCallBody) as info:
        HostRequest.from_json(1, {"epoch": 2, "checkpoint": None, "routing": routing})
    assert info.value.field == "routing"
    with pytest.raises(InvalidCallBody) as info:
        WarmRequest.from_json(1, {"migration_id": "m", "routing": routing})
    assert info.value.field == "routing"


def test_a_null_routing_is_no_routing() -> None:
    assert HostRequest.from_json(1, {"epoch": 2, "routing": None}).routing is None
    assert WarmRequest.from_json(1, {"migration_id": "m"}).routing is None


def test_replies_read_back_and_malformed_ones_read_as_none() -> None:
    progress = CutReply(partition=1, epoch=2, offset=9, done=False, uri=None)
    done = CutReply(partition=1, epoch=2, offset=9, done=True, uri="u")
    assert CutReply.from_json(progress.to_json()) == progress
    assert CutReply.from_json(done.to_json()) == done
    good = done.to_json()
    for bad in (
        None,
        [],
        {**good, "done": None},
        {**good, "uri": None},  # done without a checkpoint
        {**good, "uri": 5},
        {**good, "epoch": 0},
        {**good, "offset": -1},
        {**good, "partition": "1"},
        {k: v for k, v in good.items() if k != "offset"},
    ):
        assert CutReply.from_json(bad) is None, bad
    built = BuildReply(
        generation=1, done=True, checkpoints=(BuiltCheckpoint(partition=0, offset=5, uri="c"),)
    )
    running = BuildReply(generation=1, done=False, checkpoints=())
    assert BuildReply.from_json(built.to_json()) == built
    assert BuildReply.from_json(running.to_json()) == running
    ok = built.to_json()
    for bad in (
        "x",
        {**ok, "generation": True},
        {**ok, "done": 1},
        {**ok, "checkpoints": None},
        {**ok, "checkpoints": []},  # done with nothing built
        {**ok, "checkpoints": [{"partition": 0, "offset": 5}]},
        {**ok, "checkpoints": [{"partition": 0, "offset": "5", "uri": "c"}]},
        {**ok, "checkpoints": ["c"]},
    ):
        assert BuildReply.from_json(bad) is None, bad
