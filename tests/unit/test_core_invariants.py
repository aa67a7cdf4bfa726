"""The invariants (coordinator/core/invariants.py) hold of applied states and catch each break.

The states that break them are made by writing records directly, as no command may."""

from __future__ import annotations

from dataclasses import replace

from coordinator.core.commands import (
    CheckpointReport,
    DrainWorker,
    Move,
    RecordCheckpoints,
    RegisterWorker,
    StartRelease,
)
from coordinator.core.invariants import (
    Ledger,
    gate_violations,
    settled_violations,
    state_violations,
    step_violations,
    view,
)
from coordinator.core.model import (
    Checkpoint,
    MigrationId,
    PartitionStatus,
    WorkerState,
)
from coordinator.core.state import ClusterState
from tests.unit.test_core_state import W1, W2, W3, ok, plan
from tests.unit.test_core_state import s as s  # the fixture, re-exported for pytest

REPORT = RecordCheckpoints(worker_id=W1, incarnation=1, entries=(), now_ms=1)


def _ck(offset: int, epoch: int = 1) -> Checkpoint:
    return Checkpoint(offset=offset, uri=f"u{offset}", epoch=epoch, at_ms=0)


def test_an_applied_state_keeps_them(s: ClusterState) -> None:
    before = view(s)
    cmd = DrainWorker(worker_id=W1, moves=(Move(partition=0, source=W1, target=W2),), now_ms=40)
    ok(s, cmd)
    assert step_violations(before, s, cmd) == []
    ok(s, StartRelease(migration_id=MigrationId("m-1"), now_ms=41))
    assert state_violations(s) == []
    assert Ledger().observe("c0", s) == []


def test_owners_must_be_live_and_only_of_assigned_partitions(s: ClusterState) -> None:
    s.put_worker(replace(s.workers[W1], state=WorkerState.DEAD))
    assert any("p0 owned by w1, which is not active/draining" in v for v in state_violations(s))
    s.put_partition(replace(s.partitions[1], status=PartitionStatus.UNASSIGNED))
    assert any("p1 is unassigned with owner w2" in v for v in state_violations(s))


def test_migrations_and_partitions_must_agree(s: ClusterState) -> None:
    (m1,) = plan(s, (0, W1, W2))
    s.put_partition(replace(s.partitions[0], owner=W2))
    assert any(f"{m1} is planned but p0 is w2's" in v for v in state_violations(s))
    s.put_partition(replace(s.partitions[0], owner=W1, migration=None))
    assert any(f"{m1} in flight but p0 points at None" in v for v in state_violations(s))
    s.put_partition(replace(s.partitions[1], migration=m1))
    assert any(f"p1 points at {m1}" in v for v in state_violations(s))


def test_the_fallback_chain_is_bounded_newest_first_and_never_stuck_online(
    s: ClusterState,
) -> None:
    p0 = s.partitions[0]
    s.put_partition(replace(p0, checkpoint=_ck(5), earlier=(_ck(7),)))
    assert any("not newest first" in v for v in state_violations(s))
    s.put_partition(replace(p0, earlier=(_ck(4),)))
    assert any("without a current one" in v for v in state_violations(s))
    chain = tuple(_ck(9 - i) for i in range(5))
    s.put_partition(replace(p0, checkpoint=_ck(10), earlier=chain))
    assert any("keeps 5 earlier checkpoints" in v for v in state_violations(s))
    s.put_partition(replace(p0, checkpoint=None, earlier=(), stuck="lost"))
    assert state_violations(s) == ["p0 is online and marked stuck"]


def test_the_indices_must_equal_a_scan(s: ClusterState) -> None:
    s._owned[W1].discard(0)
    s._by_state[WorkerState.ACTIVE].discard(W3)
    problems = state_violations(s)
    assert any("owner index of w1 [3] != [0, 3]" in v for v in problems)
    assert any("index of active workers" in v for v in problems)


def test_a_step_must_not_go_back_nor_give_one_epoch_two_owners(s: ClusterState) -> None:
    before = view(s)
    s.put_partition(replace(s.partitions[0], epoch=0))
    s.put_partition(replace(s.partitions[1], owner=W3))
    s.generation -= 1
    problems = step_violations(before, s, REPORT)
    assert "RecordCheckpoints took p0 epoch back to 0" in problems
    assert "p1 epoch 1 has two owners: w2 and w3" in problems
    assert "RecordCheckpoints took the generation back to 0" in problems


def test_a_checkpoint_is_accepted_only_at_the_epoch_from_the_owner(s: ClusterState) -> None:
    before = view(s)
    s.put_partition(replace(s.partitions[0], checkpoint=_ck(5, epoch=0)))
    s.put_partition(replace(s.partitions[1], checkpoint=_ck(6)))
    problems = step_violations(before, s, REPORT)
    assert problems == [
        "checkpoint p0 accepted at stale epoch 0 (current 1, owner w1)",
        "checkpoint p1 accepted from w1, not its owner",
    ]
    # A real report of the owner at its epoch is fine.
    again = view(s)
    entry = CheckpointReport(partition=3, epoch=1, offset=9, uri="u9")
    report = RecordCheckpoints(worker_id=W1, incarnation=1, entries=(entry,), now_ms=2)
    ok(s, report)
    assert step_violations(again, s, report) == []


def test_a_change_outside_the_lifecycle_tables_is_named(s: ClusterState) -> None:
    before = view(s)
    s.put_worker(replace(s.workers[W1], state=WorkerState.DRAINING))
    s.put_partition(replace(s.partitions[1], status=PartitionStatus.ASSIGNING))
    problems = step_violations(before, s, REPORT)
    assert any("moved worker w1 WorkerState.ACTIVE -> WorkerState.DRAINING" in v for v in problems)
    assert any("moved partition 1 PartitionStatus.ONLINE" in v for v in problems)


def test_the_ledger_holds_a_run_across_replicas(s: ClusterState) -> None:
    ledger = Ledger()
    assert ledger.observe("c0", s) == []
    other = ClusterState()
    other.partitions = [replace(p, owner=W3) if p.partition == 0 else p for p in s.partitions]
    other.generation = s.generation
    assert ledger.observe("c1", other) == ["p0 epoch 1 has two owners: w1 and w3"]
    other.partitions[1] = replace(other.partitions[1], epoch=0)
    other.generation = 0
    problems = ledger.observe("c1", other)
    assert "c1 p1 epoch went back to 0" in problems
    assert "c1 generation went back to 0" in problems


def test_gates() -> None:
    assert gate_violations([("w1", 0, 1), ("w2", 0, 2), ("w1", 1, 1)]) == []
    assert gate_violations([("w1", 0, 1), ("w2", 0, 1)]) == ["p0 epoch 1 open on both w1 and w2"]


def test_settled(s: ClusterState) -> None:
    assert settled_violations(s) == []
    (m1,) = plan(s, (0, W1, W2))
    ok(s, RegisterWorker(worker_id=W2, address="again", now_ms=50))  # aborts m-1; p1, p4 rehost
    assert settled_violations(s) == ["p1 is assigning", "p4 is assigning"]
    (m2,) = plan(s, (0, W1, W2))
    problems = settled_violations(s)
    assert f"migration {m2} ended planned" in problems and m1 != m2
    s._owned[W1].discard(0)
    assert f"workers own 5 partitions of {len(s.partitions)}" in settled_violations(s)
