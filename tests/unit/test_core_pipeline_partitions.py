"""A recorded pipeline's partitions in the table: numbered from SLOT_BASE at its set-up
(ActivatePipeline), removed at its tear-down (ForgetPipeline), never numbered twice, kept
through a snapshot and through `default`'s rescale, and not placed by the planner."""

from __future__ import annotations

import dataclasses
import random

import msgpack
import pytest

from coordinator.core.codec import CodecError
from coordinator.core.commands import (
    ActivatePipeline,
    AssignPartitions,
    DropPipeline,
    ForgetPipeline,
    RegisterWorker,
)
from coordinator.core.invariants import settled_violations, state_violations
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    SLOT_BASE,
    Epoch,
    PartitionStatus,
    PipelineName,
    WorkerId,
    unassigned_partition,
)
from coordinator.core.planner import Planner
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from tests.planner_base import quick_settings
from tests.unit.test_core_pipelines import ORDERS, cluster, create, step
from tests.unit.test_planner import run

CLICKS = PipelineName("clicks")


@pytest.fixture
def s() -> ClusterState:
    return cluster()


def numbers(s: ClusterState, name: str) -> list[int]:
    return [p.partition for p in s.partitions.of(name)]


def test_the_set_up_adds_the_partitions_numbered_from_the_slot_base(s: ClusterState) -> None:
    step(s, create())
    assert numbers(s, ORDERS) == [] and s.pipelines[ORDERS].first_slot == 0
    step(s, create(name=CLICKS, partitions=3))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(s, ActivatePipeline(name=CLICKS, incarnation=2, now_ms=102))
    assert numbers(s, ORDERS) == list(range(SLOT_BASE, SLOT_BASE + 16))
    assert numbers(s, CLICKS) == list(range(SLOT_BASE + 16, SLOT_BASE + 19))
    assert s.pipelines[CLICKS].first_slot == SLOT_BASE + 16 and s.slot_seq == SLOT_BASE + 19
    assert numbers(s, DEFAULT_PIPELINE) == list(range(8)) and s.total_partitions == 8
    for p in s.partitions.of(CLICKS):
        assert (p.owner, p.epoch, p.status) == (None, 0, PartitionStatus.UNASSIGNED)
    # Iteration is by number: `default`'s first, then each pipeline's in the order set up.
    assert [p.partition for p in s.partitions][7:9] == [7, SLOT_BASE]
    # The step sent again (a new leader's retry) adds nothing.
    r = step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=103))
    assert not r.changed and len(s.partitions) == 8 + 16 + 3


def test_the_tear_down_removes_them_and_no_number_is_used_twice(s: ClusterState) -> None:
    step(s, create(partitions=4))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(s, DropPipeline(name=ORDERS, purge=True, by="ops", now_ms=102))
    assert numbers(s, ORDERS) == list(range(SLOT_BASE, SLOT_BASE + 4))  # until the forget
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=103))
    assert numbers(s, ORDERS) == [] and len(s.partitions) == 8
    step(s, create(partitions=4, now_ms=104))
    step(s, ActivatePipeline(name=ORDERS, incarnation=2, now_ms=105))
    # A namesake made since gets new numbers: no worker's gate can hold an epoch of them.
    assert numbers(s, ORDERS) == list(range(SLOT_BASE + 4, SLOT_BASE + 8))


def test_a_create_dropped_before_its_set_up_had_no_partitions(s: ClusterState) -> None:
    step(s, create())
    step(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=101))
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=102))
    assert len(s.partitions) == 8 and s.slot_seq == SLOT_BASE


def test_they_round_trip_in_a_snapshot_and_bad_rows_are_codec_errors(s: ClusterState) -> None:
    step(s, create(partitions=3))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    part = s.partitions[SLOT_BASE + 1]
    s.put_partition(dataclasses.replace(part, stuck="no checkpoint loads"))
    data = encode_state(s)
    restored = decode_state(data)
    assert restored.partitions == s.partitions and restored.slot_seq == s.slot_seq
    assert restored.partitions[SLOT_BASE + 1].stuck == "no checkpoint loads"
    assert encode_state(restored) == data
    assert state_violations(restored) == []
    good = msgpack.unpackb(data)
    seq, records, slot_seq, rows = good["pipelines"]
    for bad in (
        [seq, records, slot_seq, [[7, ORDERS, *rows[0][2:]]]],  # a number `default` has
        [seq, records, slot_seq, [[*rows[0][:1], "nope", *rows[0][2:]]]],  # no such record
        [seq, records, slot_seq, [rows[0], rows[0]]],  # one number twice
        [seq, records, SLOT_BASE - 1, rows],  # the counter below its base
        [seq, records],  # the counter and the rows left out
    ):
        with pytest.raises(CodecError):
            decode_state(msgpack.packb({**good, "pipelines": bad}))


def test_defaults_rescale_keeps_the_pipelines_partitions(s: ClusterState) -> None:
    step(s, create(partitions=2))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    theirs = list(s.partitions.of(ORDERS))
    new_default = [dataclasses.replace(unassigned_partition(i), epoch=Epoch(5)) for i in range(3)]
    s.replace_partitions(new_default)
    assert numbers(s, DEFAULT_PIPELINE) == [0, 1, 2] and s.total_partitions == 3
    assert list(s.partitions.of(ORDERS)) == theirs
    assert [p.partition for p in s.partitions] == [0, 1, 2, SLOT_BASE, SLOT_BASE + 1]


def test_the_planner_places_defaults_partitions_only() -> None:
    s = cluster(total=4)
    step(s, create(partitions=5))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    planner = Planner(
        quick_settings(total_partitions=4, suspect_after_ms=10**6, dead_after_ms=10**7),
        random.Random(1),
        s,
        0,
    )
    w1 = WorkerId("w1")
    apply(s, "w1", RegisterWorker(worker_id=w1, address="http://w1", now_ms=0))
    planner.registered(w1, 0)
    done = run(s, planner, 10)
    (assign,) = [c for c in done if isinstance(c, AssignPartitions)]
    assert sorted(a.partition for a in assign.assignments) == [0, 1, 2, 3]
    assert all(p.status is PartitionStatus.UNASSIGNED for p in s.partitions.of(ORDERS))
    assert sorted(s.owned_by(w1)) == [0, 1, 2, 3]
    batch = planner.plan(s, 20, 20)
    hosted = sorted(c.partition for c in batch.calls if hasattr(c, "partition"))
    assert hosted and all(p < 4 for p in hosted)
    # Settled means `default`'s all online; the pipeline's unplaced ones are not counted.
    assert not [v for v in settled_violations(s) if str(SLOT_BASE) in v]
