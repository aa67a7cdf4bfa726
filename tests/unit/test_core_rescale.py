"""A rescale's commands applied to a ClusterState: every accept and reject path of
StartRescale, RecordCut, StatesBuilt and FinishRescale, the invariants after each step, and
the snapshot of the routing generations and the rescale."""

from __future__ import annotations

import itertools

import pytest

from coordinator.core.commands import (
    Assignment,
    AssignPartitions,
    Bootstrap,
    BuiltCheckpoint,
    Command,
    FinalizeVersion,
    FinishRescale,
    Move,
    Ok,
    PartitionOnline,
    PlanMigrations,
    RecordCut,
    RegisterWorker,
    Rejected,
    ReportVersions,
    StartRescale,
    StatesBuilt,
)
from coordinator.core.invariants import state_violations, step_violations, view
from coordinator.core.model import (
    RESCALE_PARTITIONS_MAX,
    ROUTING_GENERATIONS_MAX,
    ChangeReason,
    MigrationPhase,
    MigrationReason,
    PartitionStatus,
    RescalePhase,
    WorkerId,
    WorkerState,
)
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from tests.unit.test_core_state import ok, rejects

W1, W2 = WorkerId("w1"), WorkerId("w2")
P = 4
_ids = itertools.count()


def step(s: ClusterState, cmd: Command) -> None:
    """Apply `cmd` (it must commit) and hold the state and the step to the invariants."""
    before = view(s)
    result = apply(s, f"s-{next(_ids)}", cmd)
    assert isinstance(result, Ok), result
    assert state_violations(s) == []
    assert step_violations(before, s, cmd) == []


def online_cluster(total: int = P) -> ClusterState:
    """`total` partitions ONLINE on w1 and w2 at epoch 1, command-set version 4 finalized."""
    s = ClusterState()
    for cmd in [
        ReportVersions(node_id="n1", min_version=1, max_version=4, package_version="x", now_ms=1),
        FinalizeVersion(version=4, voters=("n1",), now_ms=1),
        Bootstrap(total_partitions=total, now_ms=1),
        RegisterWorker(worker_id=W1, address="h:1", now_ms=2),
        RegisterWorker(worker_id=W2, address="h:2", now_ms=2),
        AssignPartitions(
            assignments=tuple(Assignment(partition=p, owner=(W1, W2)[p % 2]) for p in range(total)),
            now_ms=3,
        ),
        *(
            PartitionOnline(partition=p, epoch=1, owner=(W1, W2)[p % 2], now_ms=4)
            for p in range(total)
        ),
    ]:
        step(s, cmd)
    return s


def cut(p: int, epoch: int = 1, offset: int = 100) -> RecordCut:
    return RecordCut(partition=p, epoch=epoch, offset=offset, uri=f"//cut{p}", now_ms=10)


def built(m: int, generation: int = 1) -> StatesBuilt:
    return StatesBuilt(
        generation=generation,
        checkpoints=tuple(
            BuiltCheckpoint(partition=q, offset=generation << 40, uri=f"//b{q}") for q in range(m)
        ),
        now_ms=20,
    )


def moving(m: int = 6) -> ClusterState:
    s = online_cluster()
    step(s, StartRescale(partitions=m, by="admin", now_ms=5))
    for p in range(P):
        step(s, cut(p))
    return s


def test_bootstrap_starts_generation_zero() -> None:
    s = online_cluster()
    assert s.routing == (P,) and s.rescale is None


def test_start_rescale() -> None:
    s = online_cluster()
    assert ok(s, StartRescale(partitions=6, by="admin", now_ms=5)) == {
        "generation": 1,
        "partitions": 6,
        "previous": P,
        "phase": "CUTTING",
    }
    r = s.rescale
    assert r is not None and r.cuts == (None,) * P and r.base_epoch is None and r.by == "admin"
    assert s.routing == (P,) and s.total_partitions == P  # nothing routes by it yet


@pytest.mark.parametrize("m", [0, RESCALE_PARTITIONS_MAX + 1])
def test_start_rescale_rejects_a_count_out_of_range(m: int) -> None:
    rejects(online_cluster(), StartRescale(partitions=m, by="a", now_ms=5), "invalid", "partitions")


def test_start_rescale_rejects_the_same_count_and_an_empty_caller() -> None:
    s = online_cluster()
    rejects(s, StartRescale(partitions=P, by="a", now_ms=5), "same_partition_count", "partitions")
    rejects(s, StartRescale(partitions=2, by="", now_ms=5), "invalid", "by")


def test_one_rescale_at_a_time() -> None:
    s = online_cluster()
    step(s, StartRescale(partitions=6, by="admin", now_ms=5))
    rejects(s, StartRescale(partitions=8, by="admin", now_ms=6), "rescale_in_flight")


def test_start_rescale_before_bootstrap_and_before_version_4() -> None:
    early = apply(ClusterState(), "early", StartRescale(partitions=2, by="a", now_ms=1))
    assert isinstance(early, Rejected) and early.code == "version_not_finalized"
    s = ClusterState()
    report = ReportVersions(
        node_id="n", min_version=1, max_version=4, package_version="v", now_ms=1
    )
    step(s, report)
    step(s, FinalizeVersion(version=4, voters=("n",), now_ms=1))
    rejects(s, StartRescale(partitions=2, by="a", now_ms=1), "not_bootstrapped")


def test_record_cut_accepts_fences_repeats_and_ends_cutting() -> None:
    s = online_cluster()
    step(s, StartRescale(partitions=6, by="admin", now_ms=5))
    assert ok(s, cut(0, epoch=2)) == {"partition": 0, "status": "fenced", "phase": "CUTTING"}
    assert s.rescale is not None and s.rescale.cuts[0] is None
    assert ok(s, cut(0)) == {"partition": 0, "status": "accepted", "phase": "CUTTING"}
    c = s.rescale.cuts[0]
    assert c is not None and (c.offset, c.uri, c.epoch) == (100, "//cut0", 1)
    assert s.partitions[0].checkpoint == c  # a failover replays from the cut
    partitions, rescale = list(s.partitions), s.rescale
    assert ok(s, cut(0)) == {"partition": 0, "status": "accepted", "phase": "CUTTING"}
    assert list(s.partitions) == partitions and s.rescale == rescale  # a repeat changes nothing
    rejects(s, cut(0, offset=101), "conflict", "offset")
    for p in range(1, P - 1):
        step(s, cut(p))
    assert ok(s, cut(P - 1)) == {"partition": P - 1, "status": "accepted", "phase": "MOVING"}
    assert s.rescale.phase is RescalePhase.MOVING and s.rescale.base_epoch == 2
    # A late repeat while MOVING is still an answer.
    assert ok(s, cut(1)) == {"partition": 1, "status": "accepted", "phase": "MOVING"}


def test_record_cut_rejects() -> None:
    s = online_cluster()
    rejects(s, cut(0), "conflict", "partition", match="no rescale")
    step(s, StartRescale(partitions=6, by="admin", now_ms=5))
    rejects(s, cut(P), "invalid", "partition")
    rejects(s, RecordCut(partition=0, epoch=1, offset=1, uri="", now_ms=9), "invalid", "uri")


def test_record_cut_behind_the_checkpoint_is_refused() -> None:
    s = online_cluster()
    step(s, StartRescale(partitions=6, by="admin", now_ms=5))
    step(s, cut(0, offset=100))
    s2 = online_cluster()
    step(s2, StartRescale(partitions=6, by="admin", now_ms=5))
    from coordinator.core.commands import CheckpointReport, RecordCheckpoints

    step(
        s2,
        RecordCheckpoints(
            worker_id=W1,
            incarnation=1,
            entries=(CheckpointReport(partition=0, epoch=1, offset=200, uri="//c"),),
            now_ms=6,
        ),
    )
    rejects(s2, cut(0, offset=100), "conflict", "offset")


@pytest.mark.parametrize("m", [6, 2, 1])
def test_states_built_replaces_the_table(m: int) -> None:
    s = moving(m)
    gen = s.generation
    assert ok(s, built(m)) == {"generation": 1, "partitions": m, "previous": P, "phase": "HOSTING"}
    assert s.routing == (P, m) and s.total_partitions == m == len(s.partitions)
    assert s.generation == gen + 1
    for q, part in enumerate(s.partitions):
        assert part.partition == q and part.owner is None
        assert part.status is PartitionStatus.UNASSIGNED
        assert part.epoch == 2 and part.checkpoint is not None
        assert (part.checkpoint.offset, part.checkpoint.uri, part.checkpoint.epoch) == (
            1 << 40,
            f"//b{q}",
            2,
        )
        assert [h.reason for h in part.history] == [ChangeReason.RESCALE]
    assert s.owned_by(W1) == [] and s.assignment_of(W1) == ()
    assert state_violations(s) == []


def test_states_built_rejects() -> None:
    s = online_cluster()
    rejects(s, built(6), "conflict", "generation")
    step(s, StartRescale(partitions=6, by="admin", now_ms=5))
    rejects(s, built(6), "conflict", match="cutting")
    for p in range(P):
        step(s, cut(p))
    rejects(s, built(6, generation=2), "conflict", "generation")
    rejects(s, built(5), "invalid", "checkpoints")
    rejects(s, built(7), "invalid", "checkpoints")
    twice = StatesBuilt(
        generation=1,
        checkpoints=tuple(BuiltCheckpoint(partition=0, offset=1, uri="//x") for _ in range(6)),
        now_ms=20,
    )
    rejects(s, twice, "invalid", "checkpoints")
    no_uri = StatesBuilt(
        generation=1,
        checkpoints=tuple(BuiltCheckpoint(partition=q, offset=1, uri="") for q in range(6)),
        now_ms=20,
    )
    rejects(s, no_uri, "invalid", "checkpoints")
    step(s, built(6))
    rejects(s, built(6), "conflict", match="hosting")


def test_states_built_aborts_migrations_and_ends_drains() -> None:
    s = online_cluster()
    step(
        s,
        PlanMigrations(
            moves=(Move(partition=0, source=W1, target=W2),),
            reason=MigrationReason.ADMIN,
            now_ms=4,
        ),
    )
    from coordinator.core.commands import DrainWorker

    step(s, DrainWorker(worker_id=W2, moves=(Move(partition=1, source=W2, target=W1),), now_ms=4))
    step(s, StartRescale(partitions=3, by="admin", now_ms=5))
    for p in range(P):
        step(s, cut(p))
    step(s, built(3))
    assert all(m.phase is MigrationPhase.ABORTED for m in s.migrations.values())
    assert {m.note for m in s.migrations.values()} == {"rescale"}
    assert s.workers[W2].state is WorkerState.LEFT and s.workers[W1].state is WorkerState.ACTIVE


def test_finish_rescale() -> None:
    s = moving(2)
    rejects(s, FinishRescale(generation=1, now_ms=30), "conflict", match="moving")
    step(s, built(2))
    rejects(s, FinishRescale(generation=2, now_ms=30), "conflict", "generation")
    rejects(s, FinishRescale(generation=1, now_ms=30), "not_online", match="2 of the 2")
    step(s, AssignPartitions(assignments=(Assignment(partition=0, owner=W1),), now_ms=31))
    step(s, PartitionOnline(partition=0, epoch=3, owner=W1, now_ms=32))
    rejects(s, FinishRescale(generation=1, now_ms=33), "not_online", match="1 of the 2")
    step(s, AssignPartitions(assignments=(Assignment(partition=1, owner=W2),), now_ms=33))
    step(s, PartitionOnline(partition=1, epoch=3, owner=W2, now_ms=34))
    assert ok(s, FinishRescale(generation=1, now_ms=35))["phase"] == "DONE"
    assert ok(s, FinishRescale(generation=1, now_ms=36))["phase"] == "DONE"  # again: an answer
    assert s.rescale is not None and s.rescale.updated_at_ms == 35
    # The next rescale starts from the new table, above every epoch of both.
    step(s, StartRescale(partitions=5, by="admin", now_ms=40))
    assert s.rescale.generation == 2 and s.rescale.previous == 2
    for p in range(2):
        step(s, cut(p, epoch=3, offset=(1 << 40) + 5))
    step(s, built(5, generation=2))
    assert s.routing == (P, 2, 5) and all(p.epoch == 4 for p in s.partitions)


def test_routing_generations_are_bounded() -> None:
    s = online_cluster(1)
    s.routing = (1,) * ROUTING_GENERATIONS_MAX  # as if it had rescaled that often
    rejects(s, StartRescale(partitions=2, by="admin", now_ms=5), "conflict", match="generations")


def test_snapshot_carries_routing_and_rescale() -> None:
    plain = online_cluster()
    data = encode_state(plain)
    assert b"routing" not in data and b"rescale" not in data  # the format before rescales
    assert decode_state(data).routing == (P,)
    for s in (moving(6), online_cluster()):
        if s.rescale is None:
            step(s, StartRescale(partitions=6, by="admin", now_ms=5))
            step(s, cut(1))
        data = encode_state(s)
        restored = decode_state(data)
        assert restored.rescale == s.rescale and restored.routing == s.routing
        assert encode_state(restored) == data
    s = moving(2)
    step(s, built(2))
    restored = decode_state(encode_state(s))
    assert restored.routing == (P, 2) and restored.rescale == s.rescale
    assert restored.partitions == s.partitions
    assert state_violations(restored) == []


def test_snapshot_refuses_routing_that_does_not_end_at_the_count() -> None:
    import msgpack

    from coordinator.core.wire_fields import CodecError

    s = moving(2)
    step(s, built(2))
    good = msgpack.unpackb(encode_state(s))
    for bad in ([P, 3], [], [0, 2], ["x"]):
        with pytest.raises(CodecError):
            decode_state(msgpack.packb({**good, "routing": bad}))
    with pytest.raises(CodecError):
        decode_state(msgpack.packb({**good, "rescale": good["rescale"][:5]}))


def test_invariants_catch_a_broken_rescale() -> None:
    from dataclasses import replace

    s = moving(6)
    assert state_violations(s) == []
    r = s.rescale
    assert r is not None
    s.rescale = replace(r, cuts=r.cuts[:-1])
    assert any("cuts" in v for v in state_violations(s))
    s.rescale = replace(r, base_epoch=None)
    assert any("moving" in v for v in state_violations(s))
    s.rescale = r
    s.routing = (P, 6)
    assert any("routing" in v for v in state_violations(s))


def test_a_migration_of_a_replaced_table_is_refused_not_crashed_on() -> None:
    """A hand-off (or any step) of a migration StatesBuilt aborted names a partition the new
    table may not have: it is refused like any finished migration's."""
    from coordinator.core.commands import HandOff, StartRelease
    from coordinator.core.model import MigrationId

    s = online_cluster()
    move = Move(partition=P - 1, source=W2, target=W1)
    step(s, PlanMigrations(moves=(move,), reason=MigrationReason.ADMIN, now_ms=4))
    step(s, StartRelease(migration_id=MigrationId("m-1"), now_ms=4))
    step(s, StartRescale(partitions=2, by="admin", now_ms=5))
    for p in range(P):
        step(s, cut(p))
    step(s, built(2))
    late = HandOff(migration_id=MigrationId("m-1"), checkpoint=None, now_ms=30)
    rejects(s, late, "conflict", "migration_id", match="aborted")
