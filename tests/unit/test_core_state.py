"""Every command's validation and transitions, applied directly to a ClusterState."""

from __future__ import annotations

import itertools
from typing import Any, cast

import msgpack
import pytest

from coordinator.core import cluster as cluster_module
from coordinator.core import state as state_module
from coordinator.core.codec import encode_result
from coordinator.core.commands import (
    AbortMigration,
    Assignment,
    AssignPartitions,
    Barrier,
    Bootstrap,
    CheckpointReport,
    Command,
    DeclareDead,
    DrainWorker,
    FinalCheckpoint,
    HandOff,
    Move,
    Ok,
    PartitionOnline,
    PlanMigrations,
    RecordCheckpoints,
    RegisterWorker,
    Rejected,
    StartRelease,
)
from coordinator.core.model import (
    HISTORY_PER_PARTITION_MAX,
    TOTAL_PARTITIONS_MAX,
    ChangeReason,
    Checkpoint,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionStatus,
    WorkerId,
    WorkerState,
)
from coordinator.core.snapshot import encode_state
from coordinator.core.state import ClusterState, apply

W1, W2, W3, W4 = WorkerId("w1"), WorkerId("w2"), WorkerId("w3"), WorkerId("w4")
M1, M2 = MigrationId("m-1"), MigrationId("m-2")
P = 6
_ids = itertools.count()


def ok(s: ClusterState, cmd: Command, request_id: str | None = None) -> dict[str, Any]:
    """The command's result value as it goes over the wire (a map, see codec.py)."""
    result = apply(s, request_id or f"auto-{next(_ids)}", cmd)
    assert isinstance(result, Ok), result
    _, _, value = msgpack.unpackb(encode_result(result))
    return cast(dict[str, Any], value)


def rejects(
    s: ClusterState, cmd: Command, code: str, field: str | None = "", match: str = ""
) -> Rejected:
    """Assert a rejection, its code (and field), and that it changed nothing at all."""
    before = encode_state(s)
    result = apply(s, f"auto-{next(_ids)}", cmd)
    assert isinstance(result, Rejected), result
    assert result.code == code, result
    if field != "":
        assert result.field == field, result
    assert match in result.message
    assert encode_state(s) == before
    return result


def register(s: ClusterState, *wids: WorkerId) -> None:
    for w in wids:
        ok(s, RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=10))


@pytest.fixture
def s() -> ClusterState:
    """P partitions: p owned by [w1, w2, w3][p % 3], ONLINE at epoch 1; generation 1."""
    st = ClusterState()
    ok(st, Bootstrap(total_partitions=P, now_ms=1))
    register(st, W1, W2, W3)
    owners = [W1, W2, W3]
    ok(
        st,
        AssignPartitions(
            assignments=tuple(Assignment(partition=p, owner=owners[p % 3]) for p in range(P)),
            now_ms=20,
        ),
    )
    for p in range(P):
        ok(st, PartitionOnline(partition=p, epoch=1, owner=owners[p % 3], now_ms=30))
    return st


def plan(s: ClusterState, *moves: tuple[int, WorkerId, WorkerId]) -> list[MigrationId]:
    value = ok(
        s,
        PlanMigrations(
            moves=tuple(Move(partition=p, source=a, target=b) for p, a, b in moves),
            reason=MigrationReason.ADMIN,
            now_ms=40,
        ),
    )
    return [MigrationId(m["id"]) for m in value["migrations"]]


def phase(s: ClusterState, mid: MigrationId) -> MigrationPhase:
    return s.migrations[mid].phase


# --- Bootstrap ---------------------------------------------------------------------------------


def test_bootstrap_creates_unassigned_partitions() -> None:
    st = ClusterState()
    assert ok(st, Bootstrap(total_partitions=4, now_ms=1)) == {
        "total_partitions": 4,
        "created": True,
    }
    assert [p.partition for p in st.partitions] == [0, 1, 2, 3]
    assert all(p.status is PartitionStatus.UNASSIGNED and p.epoch == 0 for p in st.partitions)
    assert all(p.owner is None and p.history == () for p in st.partitions)
    assert st.generation == 0
    assert ok(st, Bootstrap(total_partitions=4, now_ms=2)) == {
        "total_partitions": 4,
        "created": False,
    }
    rejects(st, Bootstrap(total_partitions=5, now_ms=2), "conflict", "total_partitions")


@pytest.mark.parametrize("total", [0, TOTAL_PARTITIONS_MAX + 1])
def test_bootstrap_bounds(total: int) -> None:
    rejects(ClusterState(), Bootstrap(total_partitions=total, now_ms=1), "invalid")


@pytest.mark.parametrize(
    "cmd",
    [
        RegisterWorker(worker_id=W1, address="http://a", now_ms=1),
        DeclareDead(worker_ids=(W1,), assignments=(), now_ms=1),
        AssignPartitions(assignments=(), now_ms=1),
        PartitionOnline(partition=0, epoch=0, owner=W1, now_ms=1),
        PlanMigrations(moves=(), reason=MigrationReason.ADMIN, now_ms=1),
        StartRelease(migration_id=M1, now_ms=1),
        HandOff(migration_id=M1, checkpoint=None, now_ms=1),
        AbortMigration(migration_id=M1, note="", now_ms=1),
        RecordCheckpoints(worker_id=W1, incarnation=1, entries=(), now_ms=1),
        DrainWorker(worker_id=W1, moves=(), now_ms=1),
    ],
    ids=lambda c: type(c).__name__,
)
def test_commands_need_bootstrap(cmd: Command) -> None:
    rejects(ClusterState(), cmd, "not_bootstrapped")


def test_barrier_works_before_bootstrap_and_is_not_recorded() -> None:
    st = ClusterState()
    assert ok(st, Barrier(nonce="n1"), "same") == {"nonce": "n1"}
    assert ok(st, Barrier(nonce="n2"), "same") == {"nonce": "n2"}
    assert len(st.requests) == 0


# --- RegisterWorker ----------------------------------------------------------------------------


def test_register_new_worker(s: ClusterState) -> None:
    value = ok(s, RegisterWorker(worker_id=W4, address="http://four", now_ms=50))
    assert value == {"worker_id": W4, "incarnation": 1, "rehosted": []}
    w = s.workers[W4]
    assert (w.state, w.incarnation, w.address, w.registered_at_ms) == (
        WorkerState.ACTIVE, 1, "http://four", 50,
    )  # fmt: skip


def test_register_rejects_bad_input(s: ClusterState) -> None:
    rejects(s, RegisterWorker(worker_id=WorkerId("bad id"), address="x", now_ms=1), "invalid")
    rejects(s, RegisterWorker(worker_id=W4, address="", now_ms=1), "invalid", "address")


def test_reregister_bumps_epochs_of_owned_partitions(s: ClusterState) -> None:
    gen = s.generation
    value = ok(s, RegisterWorker(worker_id=W1, address="http://new", now_ms=50))
    assert value == {"worker_id": W1, "incarnation": 2, "rehosted": [0, 3]}
    assert s.workers[W1].address == "http://new"
    assert s.workers[W1].registered_at_ms == 10
    for p in (0, 3):
        part = s.partitions[p]
        assert (part.owner, part.epoch, part.status) == (W1, 2, PartitionStatus.ASSIGNING)
        assert part.history[-1].reason is ChangeReason.RESTART
    assert s.partitions[1].epoch == 1  # other workers' partitions untouched
    assert s.generation == gen + 1


def test_reregister_without_partitions_keeps_generation(s: ClusterState) -> None:
    register(s, W4)
    gen = s.generation
    assert ok(s, RegisterWorker(worker_id=W4, address="x", now_ms=1))["incarnation"] == 2
    assert s.generation == gen


def test_reregister_aborts_its_migrations(s: ClusterState) -> None:
    # w1 is source of m-1 (PLANNED, partition 0) and target of m-2 (RELEASING, partition 1).
    m1, m2 = plan(s, (0, W1, W2), (1, W2, W1))
    ok(s, StartRelease(migration_id=m2, now_ms=41))
    ok(s, RegisterWorker(worker_id=W1, address="x", now_ms=50))
    assert phase(s, m1) is phase(s, m2) is MigrationPhase.ABORTED
    assert s.migrations[m1].note == "worker re-registered"
    assert s.partitions[0].migration is None and s.partitions[0].epoch == 2  # RESTART bump
    # w2 closed its gate to release partition 1 to w1: it reopens under a new epoch.
    p1 = s.partitions[1]
    assert (p1.owner, p1.epoch, p1.status, p1.migration) == (
        W2, 2, PartitionStatus.ASSIGNING, None,
    )  # fmt: skip
    assert p1.history[-1].reason is ChangeReason.ABORT


def test_reregister_keeps_handed_off_migration_into_it(s: ClusterState) -> None:
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=41))
    assert s.partitions[0].epoch == 2
    ok(s, RegisterWorker(worker_id=W2, address="x", now_ms=50))
    assert phase(s, m1) is MigrationPhase.HANDED_OFF
    assert s.partitions[0].migration == m1 and s.partitions[0].epoch == 3
    rejects(s, PartitionOnline(partition=0, epoch=2, owner=W2, now_ms=51), "stale_epoch")
    ok(s, PartitionOnline(partition=0, epoch=3, owner=W2, now_ms=51))
    assert phase(s, m1) is MigrationPhase.DONE


def test_reregister_revives_dead_worker(s: ClusterState) -> None:
    ok(
        s,
        DeclareDead(
            worker_ids=(W3,),
            assignments=(Assignment(partition=2, owner=W1), Assignment(partition=5, owner=W2)),
            now_ms=50,
        ),
    )
    gen = s.generation
    assert ok(s, RegisterWorker(worker_id=W3, address="x", now_ms=60))["rehosted"] == []
    assert s.workers[W3].state is WorkerState.ACTIVE and s.workers[W3].incarnation == 2
    assert s.generation == gen


def test_owning_changes_name_who_started_or_stopped_owning(
    s: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner follows the owning set (ACTIVE or DRAINING) by these changes instead of
    reading every worker each scan; it must read the whole set when they are not known."""
    none, cursor = s.owning_changes_since(None)
    assert none is None  # no cursor yet: read the whole set
    assert s.owning_changes_since(cursor) == (set(), cursor)
    register(s, W4)  # joins
    register(s, W1)  # re-registers, ACTIVE before and after: no change
    changed, cursor = s.owning_changes_since(cursor)
    assert changed == {W4}
    ok(s, DeclareDead(worker_ids=(W4,), assignments=(), now_ms=50))
    ok(s, DrainWorker(worker_id=W3, moves=(), now_ms=50))  # ACTIVE -> DRAINING: still owning
    changed, cursor = s.owning_changes_since(cursor)
    assert changed == {W4}
    # A reindex (a snapshot's decode) starts a new era: old cursors read the whole set,
    # even once as many changes were made since as the cursor had counted.
    s.reindex()
    register(s, *(WorkerId(f"new{i}") for i in range(cursor[1])))
    changed, cursor = s.owning_changes_since(cursor)
    assert changed is None
    # More changes than are kept: the whole set again.
    monkeypatch.setattr(cluster_module, "OWNING_CHANGES_KEPT_MAX", 2)
    small = ClusterState()
    ok(small, Bootstrap(total_partitions=1, now_ms=1))
    _, at = small.owning_changes_since(None)
    register(small, W1, W2)
    changed, _ = small.owning_changes_since(at)
    assert changed == {W1, W2}
    register(small, W3)
    assert small.owning_changes_since(at)[0] is None


# --- DeclareDead -------------------------------------------------------------------------------


def test_declare_dead_reassigns_in_one_command(s: ClusterState) -> None:
    ok(
        s,
        RecordCheckpoints(
            worker_id=W1,
            incarnation=1,
            entries=(CheckpointReport(partition=0, epoch=1, offset=9, uri="u0"),),
            now_ms=45,
        ),
    )
    gen = s.generation
    value = ok(
        s,
        DeclareDead(
            worker_ids=(W1,),
            assignments=(Assignment(partition=0, owner=W2), Assignment(partition=3, owner=None)),
            now_ms=50,
        ),
    )
    assert value == {"dead": [W1], "reassigned": 2, "handed_off": [], "aborted": []}
    assert s.workers[W1].state is WorkerState.DEAD
    p0, p3 = s.partitions[0], s.partitions[3]
    assert (p0.owner, p0.epoch, p0.status) == (W2, 2, PartitionStatus.ASSIGNING)
    assert p0.checkpoint == Checkpoint(offset=9, uri="u0", epoch=1, at_ms=45)
    assert p0.history[-1].reason is ChangeReason.FAILURE
    assert (p3.owner, p3.epoch, p3.status) == (None, 2, PartitionStatus.UNASSIGNED)
    assert s.generation == gen + 1
    assert s.owned_by(W1) == []


def _dead(wids: tuple[WorkerId, ...], *assign: tuple[int, WorkerId | None]) -> DeclareDead:
    return DeclareDead(
        worker_ids=wids,
        assignments=tuple(Assignment(partition=p, owner=o) for p, o in assign),
        now_ms=50,
    )


def test_declare_dead_validation(s: ClusterState) -> None:
    full = ((0, W2), (3, W2))
    rejects(s, _dead((), *full), "invalid", "worker_ids")
    rejects(s, _dead((W4,), *full), "not_found", "worker_ids")
    rejects(s, _dead((W1, W1), *full), "invalid", "worker_ids")
    rejects(s, _dead((W1,), (0, W2)), "invalid", "assignments", "1 missing")
    rejects(s, _dead((W1,), *full, (1, W3)), "invalid", "assignments", "1 not theirs")
    rejects(s, _dead((W1,), (0, W2), (0, W2), (3, W2)), "invalid", "partition")
    rejects(s, _dead((W1,), (0, W1), (3, W2)), "invalid", "owner")  # into the dead set
    rejects(s, _dead((W1, W2), (0, W3), (3, W3), (1, W2), (4, W3)), "invalid", "owner")
    rejects(s, _dead((W1,), (0, W4), (3, W2)), "invalid", "owner")  # unknown
    ok(s, DrainWorker(worker_id=W3, moves=(), now_ms=45))
    rejects(s, _dead((W1,), (0, W3), (3, W2)), "conflict", "owner")  # DRAINING target
    ok(s, _dead((W1,), *full))
    rejects(s, _dead((W1,)), "conflict", "worker_ids")  # already DEAD


def test_dead_source_hands_off_to_target(s: ClusterState) -> None:
    m1, m2 = plan(s, (0, W1, W2), (3, W1, W3))
    ok(s, StartRelease(migration_id=m1, now_ms=41))
    value = ok(s, _dead((W1,), (0, W2), (3, W2)))
    assert value["handed_off"] == [m1] and value["aborted"] == [m2]
    assert phase(s, m1) is MigrationPhase.HANDED_OFF and s.partitions[0].migration == m1
    assert phase(s, m2) is MigrationPhase.ABORTED and s.partitions[3].migration is None
    assert s.migrations[m2].note == "source dead"
    assert s.partitions[0].epoch == 2 and s.partitions[0].history[-1].reason is ChangeReason.FAILURE
    ok(s, PartitionOnline(partition=0, epoch=2, owner=W2, now_ms=60))
    assert phase(s, m1) is MigrationPhase.DONE and s.partitions[0].migration is None


def test_dead_target_aborts_and_reopens_releasing_source(s: ClusterState) -> None:
    m1, m2 = plan(s, (0, W1, W3), (1, W2, W3))
    ok(s, StartRelease(migration_id=m1, now_ms=41))
    gen = s.generation
    ok(s, _dead((W3,), (2, W1), (5, W2)))
    assert phase(s, m1) is phase(s, m2) is MigrationPhase.ABORTED
    assert s.migrations[m1].note == "target dead"
    p0, p1 = s.partitions[0], s.partitions[1]
    # RELEASING: w1 closed its gate, so it reopens at a new epoch.
    assert (p0.owner, p0.epoch, p0.status, p0.migration) == (
        W1, 2, PartitionStatus.ASSIGNING, None,
    )  # fmt: skip
    assert p0.history[-1].reason is ChangeReason.ABORT
    # PLANNED: nothing was closed, nothing to reopen.
    assert (p1.owner, p1.epoch, p1.status, p1.migration) == (W2, 1, PartitionStatus.ONLINE, None)
    assert s.generation == gen + 1


def test_dead_target_after_hand_off_is_reassigned(s: ClusterState) -> None:
    ok(s, DrainWorker(worker_id=W1, moves=(Move(partition=0, source=W1, target=W3),), now_ms=40))
    ok(s, StartRelease(migration_id=M1, now_ms=40))
    ok(s, HandOff(migration_id=M1, checkpoint=None, now_ms=41))
    ok(
        s,
        PlanMigrations(
            moves=(Move(partition=3, source=W1, target=W2),),
            reason=MigrationReason.DRAIN,
            now_ms=42,
        ),
    )
    ok(s, StartRelease(migration_id=M2, now_ms=40))
    ok(s, HandOff(migration_id=M2, checkpoint=None, now_ms=43))
    ok(s, PartitionOnline(partition=3, epoch=2, owner=W2, now_ms=44))
    assert s.workers[W1].state is WorkerState.DRAINING  # m-1 still in flight
    ok(s, _dead((W3,), (0, W2), (2, W2), (5, W2)))
    assert phase(s, M1) is MigrationPhase.ABORTED
    assert (s.partitions[0].owner, s.partitions[0].epoch) == (W2, 3)
    # The draining source owns nothing and sources nothing any more: it has left.
    assert s.workers[W1].state is WorkerState.LEFT


# --- AssignPartitions --------------------------------------------------------------------------


def _assign(*pairs: tuple[int, WorkerId | None]) -> AssignPartitions:
    return AssignPartitions(
        assignments=tuple(Assignment(partition=p, owner=o) for p, o in pairs), now_ms=70
    )


def test_assign_partitions(s: ClusterState) -> None:
    ok(s, _dead((W1,), (0, None), (3, None)))
    register(s, W4)
    ok(s, DrainWorker(worker_id=W3, moves=(), now_ms=60))
    rejects(s, _assign((0, W2), (1, W2)), "conflict", "partition")  # 1 is not UNASSIGNED
    rejects(s, _assign((0, None)), "invalid", "owner")
    rejects(s, _assign((0, W1)), "conflict", "owner")  # DEAD
    rejects(s, _assign((0, W3)), "conflict", "owner")  # DRAINING
    rejects(s, _assign((0, WorkerId("nobody"))), "invalid", "owner")
    rejects(s, _assign((0, W2), (0, W2)), "invalid", "partition")
    rejects(s, _assign((0, W2), (P, W2)), "invalid", "partition")
    gen = s.generation
    assert ok(s, _assign((0, W4), (3, W2))) == {"assigned": 2}
    assert (s.partitions[0].owner, s.partitions[0].epoch, s.partitions[0].status) == (
        W4, 3, PartitionStatus.ASSIGNING,
    )  # fmt: skip
    assert s.partitions[0].history[-1].reason is ChangeReason.ASSIGNED
    assert s.generation == gen + 1
    assert ok(s, _assign()) == {"assigned": 0}
    assert s.generation == gen + 1


# --- PartitionOnline ---------------------------------------------------------------------------


def test_partition_online_acks(s: ClusterState) -> None:
    ok(s, RegisterWorker(worker_id=W1, address="x", now_ms=50))  # partition 0 -> epoch 2
    gen = s.generation
    r = rejects(s, PartitionOnline(partition=0, epoch=1, owner=W1, now_ms=51), "stale_epoch")
    assert r.field == "epoch"
    rejects(s, PartitionOnline(partition=0, epoch=3, owner=W1, now_ms=51), "conflict", "epoch")
    rejects(s, PartitionOnline(partition=0, epoch=2, owner=W2, now_ms=51), "conflict", "owner")
    rejects(s, PartitionOnline(partition=P, epoch=2, owner=W1, now_ms=51), "invalid")
    value = ok(s, PartitionOnline(partition=0, epoch=2, owner=W1, now_ms=51))
    assert value["changed"] is True and s.partitions[0].status is PartitionStatus.ONLINE
    assert ok(s, PartitionOnline(partition=0, epoch=2, owner=W1, now_ms=52))["changed"] is False
    assert s.generation == gen


# --- PlanMigrations ----------------------------------------------------------------------------


def test_plan_migrations_creates_deterministic_ids(s: ClusterState) -> None:
    gen = s.generation
    value = ok(
        s,
        PlanMigrations(
            moves=(
                Move(partition=0, source=W1, target=W2),
                Move(partition=1, source=W2, target=W3),
            ),
            reason=MigrationReason.ADMIN,
            now_ms=40,
        ),
    )
    assert value == {
        "migrations": [
            {"id": "m-1", "partition": 0, "from": W1, "to": W2},
            {"id": "m-2", "partition": 1, "from": W2, "to": W3},
        ]
    }
    m = s.migrations[M1]
    assert (m.phase, m.reason, m.source, m.target, m.note) == (
        MigrationPhase.PLANNED, MigrationReason.ADMIN, W1, W2, "",
    )  # fmt: skip
    assert s.partitions[0].migration == M1 and s.migration_seq == 2
    assert s.generation == gen
    assert [m.migration_id for m in s.in_flight_migrations()] == [M1, M2]


def _plan(*moves: tuple[int, str, str]) -> PlanMigrations:
    return PlanMigrations(
        moves=tuple(Move(partition=p, source=WorkerId(a), target=WorkerId(b)) for p, a, b in moves),
        reason=MigrationReason.ADMIN,
        now_ms=40,
    )


def test_plan_migrations_validation(s: ClusterState) -> None:
    plan(s, (0, W1, W2))
    rejects(s, _plan((1, "w2", "w3"), (0, "w1", "w3")), "conflict", "partition", "already moving")
    rejects(s, _plan((1, "w2", "w9")), "invalid", "to")
    rejects(s, _plan((1, "w2", "w2")), "invalid", "to")
    rejects(s, _plan((1, "w1", "w3")), "conflict", "partition")  # w1 is not the owner
    rejects(s, _plan((1, "w2", "w3"), (1, "w2", "w1")), "invalid", "partition")
    rejects(s, _plan((P, "w2", "w3")), "invalid", "partition")
    ok(s, DrainWorker(worker_id=W3, moves=(), now_ms=41))
    rejects(s, _plan((1, "w2", "w3")), "conflict", "to")  # DRAINING target
    ok(s, _dead((W1,), (3, W2), (0, None)))
    rejects(s, _plan((0, "w1", "w2")), "conflict")  # UNASSIGNED, owned by nobody


def test_plan_on_assigning_partition_is_allowed(s: ClusterState) -> None:
    ok(s, RegisterWorker(worker_id=W1, address="x", now_ms=50))
    assert s.partitions[0].status is PartitionStatus.ASSIGNING
    plan(s, (0, W1, W2))


# --- StartRelease / HandOff / AbortMigration ---------------------------------------------------


def test_start_release(s: ClusterState) -> None:
    (m1,) = plan(s, (0, W1, W2))
    rejects(s, StartRelease(migration_id=MigrationId("m-9"), now_ms=1), "not_found")
    assert ok(s, StartRelease(migration_id=m1, now_ms=41))["changed"] is True
    assert phase(s, m1) is MigrationPhase.RELEASING
    assert ok(s, StartRelease(migration_id=m1, now_ms=42))["changed"] is False
    ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=43))
    rejects(s, StartRelease(migration_id=m1, now_ms=44), "conflict")


def _checkpoint(s: ClusterState, wid: WorkerId, p: int, epoch: int, offset: int) -> str:
    value = ok(
        s,
        RecordCheckpoints(
            worker_id=wid,
            incarnation=s.workers[wid].incarnation,
            entries=(CheckpointReport(partition=p, epoch=epoch, offset=offset, uri=f"u{offset}"),),
            now_ms=35,
        ),
    )
    return str(value["results"][0]["status"])


@pytest.mark.parametrize(
    ("final", "expected", "offset"),
    [
        (FinalCheckpoint(offset=20, uri="final", epoch=1), "final", 20),
        (FinalCheckpoint(offset=10, uri="final", epoch=1), "final", 10),  # equal offset is fine
        (FinalCheckpoint(offset=20, uri="final", epoch=0), "last_accepted", 10),  # wrong epoch
        (FinalCheckpoint(offset=9, uri="final", epoch=1), "last_accepted", 10),  # backwards
        (None, "last_accepted", 10),
    ],
)
def test_hand_off_checkpoint_choice(
    s: ClusterState, final: FinalCheckpoint | None, expected: str, offset: int
) -> None:
    assert _checkpoint(s, W1, 0, 1, 10) == "accepted"
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=41))
    gen = s.generation
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    value = ok(s, HandOff(migration_id=m1, checkpoint=final, now_ms=42))
    assert value["checkpoint"] == expected and value["epoch"] == 2 and value["owner"] == W2
    p0 = s.partitions[0]
    assert p0.checkpoint is not None and p0.checkpoint.offset == offset
    assert (p0.owner, p0.epoch, p0.status, p0.migration) == (
        W2, 2, PartitionStatus.ASSIGNING, m1,
    )  # fmt: skip
    assert p0.history[-1].reason is ChangeReason.MIGRATION
    assert phase(s, m1) is MigrationPhase.HANDED_OFF
    assert s.generation == gen + 1
    # A retry with a fresh request id is a no-op, not a second epoch bump.
    assert ok(s, HandOff(migration_id=m1, checkpoint=final, now_ms=43))["changed"] is False
    assert s.partitions[0].epoch == 2 and s.generation == gen + 1


def test_hand_off_straight_from_planned_is_not_an_edge(s: ClusterState) -> None:
    """lifecycle.py: the source of a PLANNED migration was never asked to release."""
    (m1,) = plan(s, (0, W1, W2))
    r = rejects(s, HandOff(migration_id=m1, checkpoint=None, now_ms=42), "conflict")
    assert "planned" in r.message and r.field == "migration_id"


def test_hand_off_without_checkpoint_history(s: ClusterState) -> None:
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    value = ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=42))
    assert value["checkpoint"] == "last_accepted" and s.partitions[0].checkpoint is None


def test_hand_off_rejections(s: ClusterState) -> None:
    m1, m2 = plan(s, (0, W1, W2), (1, W2, W3))
    rejects(s, HandOff(migration_id=MigrationId("nope"), checkpoint=None, now_ms=1), "not_found")
    ok(s, DrainWorker(worker_id=W2, moves=(), now_ms=41))
    ok(s, StartRelease(migration_id=m1, now_ms=41))
    rejects(s, HandOff(migration_id=m1, checkpoint=None, now_ms=42), "conflict", "to")
    ok(s, AbortMigration(migration_id=m2, note="x", now_ms=43))
    rejects(s, HandOff(migration_id=m2, checkpoint=None, now_ms=44), "conflict")


def test_drain_hand_off_records_drain_reason(s: ClusterState) -> None:
    ok(s, DrainWorker(worker_id=W1, moves=(Move(partition=0, source=W1, target=W2),), now_ms=40))
    ok(s, StartRelease(migration_id=M1, now_ms=40))
    ok(s, HandOff(migration_id=M1, checkpoint=None, now_ms=41))
    assert s.partitions[0].history[-1].reason is ChangeReason.DRAIN


def test_abort_planned_and_releasing(s: ClusterState) -> None:
    m1, m2 = plan(s, (0, W1, W2), (1, W2, W3))
    ok(s, StartRelease(migration_id=m2, now_ms=41))
    gen = s.generation
    assert ok(s, AbortMigration(migration_id=m1, note="op", now_ms=42))["rehosted"] is False
    assert s.generation == gen and s.partitions[0].epoch == 1
    assert s.partitions[0].migration is None and s.migrations[m1].note == "op"
    assert ok(s, AbortMigration(migration_id=m2, note="op", now_ms=43))["rehosted"] is True
    p1 = s.partitions[1]
    assert (p1.owner, p1.epoch, p1.status, p1.migration) == (
        W2, 2, PartitionStatus.ASSIGNING, None,
    )  # fmt: skip
    assert p1.history[-1].reason is ChangeReason.ABORT
    assert s.generation == gen + 1
    rejects(s, AbortMigration(migration_id=m1, note="", now_ms=44), "conflict", match="finished")
    # The partition is free to move again.
    assert plan(s, (0, W1, W3)) == [MigrationId("m-3")]


def test_abort_after_hand_off_detaches_but_keeps_the_target(s: ClusterState) -> None:
    # A target that cannot bring the partition online (its checkpoint is lost) must not pin
    # it: abort detaches the migration; the source released it, so the target keeps it.
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=41))
    gen = s.generation
    value = ok(s, AbortMigration(migration_id=m1, note="stuck", now_ms=42))
    assert value == {"migration_id": m1, "phase": "aborted", "rehosted": False}
    part = s.partitions[0]
    assert (part.owner, part.epoch, part.status, part.migration) == (
        W2,
        2,
        PartitionStatus.ASSIGNING,
        None,
    )
    assert s.generation == gen
    rejects(s, AbortMigration(migration_id=m1, note="", now_ms=44), "conflict", match="finished")
    rejects(s, AbortMigration(migration_id=MigrationId("x"), note="", now_ms=44), "not_found")


def test_abort_after_done_is_refused(s: ClusterState) -> None:
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=41))
    ok(s, PartitionOnline(partition=0, epoch=2, owner=W2, now_ms=43))
    rejects(s, AbortMigration(migration_id=m1, note="", now_ms=44), "conflict", match="finished")


def test_reassign_supersedes_a_hand_off_that_never_came_online(s: ClusterState) -> None:
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=41))
    (m2,) = plan(s, (0, W2, W3))
    assert phase(s, m1) is MigrationPhase.ABORTED
    assert s.migrations[m1].note == f"superseded by {m2}"
    assert s.partitions[0].migration == m2 and phase(s, m2) is MigrationPhase.PLANNED
    # An in-flight migration that has not handed off still refuses a second move.
    plan(s, (1, W2, W1))
    rejects(
        s,
        PlanMigrations(
            moves=(Move(partition=1, source=W2, target=W3),),
            reason=MigrationReason.ADMIN,
            now_ms=45,
        ),
        "conflict",
        match="already moving",
    )


def test_a_superseded_hand_off_ends_its_draining_sources_drain(s: ClusterState) -> None:
    """The superseded migration was the last thing a DRAINING source had in flight: the
    PlanMigrations that supersedes it ends the drain (a lifecycle edge of its own)."""
    ok(s, DrainWorker(worker_id=W1, moves=(Move(partition=0, source=W1, target=W2),), now_ms=40))
    ok(s, DrainWorker(worker_id=W1, moves=(Move(partition=3, source=W1, target=W3),), now_ms=40))
    for mid in (M1, M2):
        ok(s, StartRelease(migration_id=mid, now_ms=41))
        ok(s, HandOff(migration_id=mid, checkpoint=None, now_ms=42))
    ok(s, PartitionOnline(partition=3, epoch=2, owner=W3, now_ms=43))
    assert s.workers[W1].state is WorkerState.DRAINING  # still the source of m-1
    (m3,) = plan(s, (0, W2, W3))
    assert phase(s, M1) is MigrationPhase.ABORTED and phase(s, m3) is MigrationPhase.PLANNED
    assert s.workers[W1].state is WorkerState.LEFT


# --- RecordCheckpoints -------------------------------------------------------------------------


def test_record_checkpoints_accepts_and_fences(s: ClusterState) -> None:
    ok(s, RegisterWorker(worker_id=W2, address="x", now_ms=31))  # w2: incarnation 2, epochs 2
    gen = s.generation
    entries = (
        CheckpointReport(partition=0, epoch=1, offset=5, uri="a"),  # w1 owns 0: accepted
        CheckpointReport(partition=0, epoch=1, offset=5, uri="b"),  # equal offset: accepted
        CheckpointReport(partition=0, epoch=1, offset=4, uri="c"),  # going back: fenced
        CheckpointReport(partition=1, epoch=1, offset=5, uri="d"),  # not the owner: fenced
        CheckpointReport(partition=3, epoch=0, offset=5, uri="e"),  # old epoch: fenced
        CheckpointReport(partition=P, epoch=1, offset=5, uri="f"),  # out of range: fenced
    )
    value = ok(s, RecordCheckpoints(worker_id=W1, incarnation=1, entries=entries, now_ms=33))
    statuses = [(r["partition"], r["status"]) for r in value["results"]]
    expected = [(0, "accepted"), (0, "accepted"), (0, "fenced"), (1, "fenced"), (3, "fenced")]
    assert statuses == [*expected, (P, "fenced")]
    reasons = [r["reason"] for r in value["results"]]
    assert reasons[0] is None and all(isinstance(r, str) for r in reasons[2:])
    assert s.partitions[0].checkpoint == Checkpoint(offset=5, uri="b", epoch=1, at_ms=33)
    assert s.partitions[3].checkpoint is None
    assert s.generation == gen
    rejects(
        s,
        RecordCheckpoints(worker_id=W2, incarnation=1, entries=entries, now_ms=34),
        "conflict",
        "incarnation",
        "stale incarnation",
    )
    rejects(s, RecordCheckpoints(worker_id=W4, incarnation=1, entries=(), now_ms=34), "not_found")
    ok(s, _dead((W3,), (2, W1), (5, W1)))
    rejects(s, RecordCheckpoints(worker_id=W3, incarnation=1, entries=(), now_ms=34), "conflict")


# --- DrainWorker -------------------------------------------------------------------------------


def test_drain_worker_moves_then_leaves(s: ClusterState) -> None:
    value = ok(
        s,
        DrainWorker(
            worker_id=W1,
            moves=(
                Move(partition=0, source=W1, target=W2),
                Move(partition=3, source=W1, target=W3),
            ),
            now_ms=40,
        ),
    )
    assert value["state"] == "draining" and len(value["migrations"]) == 2
    assert all(m.reason is MigrationReason.DRAIN for m in s.in_flight_migrations())
    assert s.active_workers() == [W2, W3]
    for mid, p, target in ((M1, 0, W2), (M2, 3, W3)):
        ok(s, StartRelease(migration_id=mid, now_ms=41))
        ok(s, HandOff(migration_id=mid, checkpoint=None, now_ms=42))
        assert s.workers[W1].state is WorkerState.DRAINING
        value = ok(s, PartitionOnline(partition=p, epoch=2, owner=target, now_ms=43))
        assert value["migration_done"] == mid
    assert value["left"] == W1
    assert s.workers[W1].state is WorkerState.LEFT
    rejects(s, DrainWorker(worker_id=W1, moves=(), now_ms=50), "conflict")


def test_drain_idle_worker_leaves_at_once(s: ClusterState) -> None:
    register(s, W4)
    assert ok(s, DrainWorker(worker_id=W4, moves=(), now_ms=40))["state"] == "left"


def test_drain_in_steps(s: ClusterState) -> None:
    # The leader may bound concurrency: drain with one move now, plan the rest later.
    ok(s, DrainWorker(worker_id=W1, moves=(Move(partition=0, source=W1, target=W2),), now_ms=40))
    ok(s, DrainWorker(worker_id=W1, moves=(Move(partition=3, source=W1, target=W2),), now_ms=41))
    assert s.workers[W1].state is WorkerState.DRAINING and len(s.in_flight_migrations()) == 2


def test_drain_validation(s: ClusterState) -> None:
    rejects(s, DrainWorker(worker_id=W4, moves=(), now_ms=40), "not_found")
    move_other = Move(partition=1, source=W2, target=W3)
    rejects(s, DrainWorker(worker_id=W1, moves=(move_other,), now_ms=40), "invalid", "source")
    self_move = Move(partition=0, source=W1, target=W1)
    rejects(s, DrainWorker(worker_id=W1, moves=(self_move,), now_ms=40), "invalid", "to")


# --- dedup, bounds, generation -----------------------------------------------------------------


def test_same_request_id_applies_once(s: ClusterState) -> None:
    cmd = _plan((0, "w1", "w2"))
    first = apply(s, "req-x", cmd)
    snapshot = encode_state(s)
    assert apply(s, "req-x", cmd) == first
    assert encode_state(s) == snapshot
    assert s.migration_seq == 1 and len(s.migrations) == 1
    # A different command under the same id is answered from the table, not applied.
    assert apply(s, "req-x", _plan((1, "w2", "w3"))) == first
    assert s.migration_seq == 1


def test_rejections_are_not_recorded(s: ClusterState) -> None:
    r = apply(s, "req-y", _plan((1, "w2", "w9")))
    assert isinstance(r, Rejected) and "req-y" not in s.requests
    register(s, WorkerId("w9"))
    assert isinstance(apply(s, "req-y", _plan((1, "w2", "w9"))), Ok)


def test_request_table_is_bounded(s: ClusterState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "REQUESTS_RETAINED_MAX", 3)
    for i in range(5):
        ok(s, Bootstrap(total_partitions=P, now_ms=i), f"b{i}")
    assert list(s.requests) == ["b2", "b3", "b4"]


def test_terminal_migrations_are_bounded(s: ClusterState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "TERMINAL_MIGRATIONS_RETAINED_MAX", 2)
    (keep,) = plan(s, (1, W2, W3))  # in flight throughout: never evicted
    for _ in range(4):
        (mid,) = plan(s, (0, W1, W2))
        ok(s, AbortMigration(migration_id=mid, note="", now_ms=50))
    assert list(s.migrations) == [keep, MigrationId("m-4"), MigrationId("m-5")]


def test_history_is_bounded(s: ClusterState) -> None:
    for i in range(HISTORY_PER_PARTITION_MAX + 5):
        ok(s, RegisterWorker(worker_id=W1, address="x", now_ms=100 + i))
    history = s.partitions[0].history
    assert len(history) == HISTORY_PER_PARTITION_MAX
    assert history[-1].epoch == s.partitions[0].epoch
    assert [h.epoch for h in history] == sorted(h.epoch for h in history)


def test_read_helpers(s: ClusterState) -> None:
    assert s.owned_by(W1) == [0, 3]
    assert s.assignment_of(W2) == ((1, 1), (4, 1))
    assert s.owned_by(W4) == [] and s.assignment_of(W4) == ()
    assert s.active_workers() == [W1, W2, W3]
    assert s.summary() == {
        "active_workers": 3, "total_workers": 3, "total_partitions": P, "generation": 1,
    }  # fmt: skip
