"""The floor of a rescaled partition's fallback chain: the build StatesBuilt started it from
stays the chain's oldest checkpoint whatever is accepted after it (a report at its own
offset, a full chain, a hand-off, the next rescale's cut), so a partition whose later
checkpoints are all lost falls back to it rather than ending stuck; and the invariants that
hold every command to that."""

from __future__ import annotations

from dataclasses import replace

from coordinator.core.commands import (
    Assignment,
    AssignPartitions,
    CheckpointReport,
    FallBack,
    FinalCheckpoint,
    FinishRescale,
    HandOff,
    MarkStuck,
    Move,
    PartitionOnline,
    PlanMigrations,
    RecordCheckpoints,
    RegisterWorker,
    StartRelease,
    StartRescale,
)
from coordinator.core.edits import accept_checkpoint
from coordinator.core.fallback import FallbackPolicy, decide
from coordinator.core.invariants import state_violations, step_violations, view
from coordinator.core.model import (
    CHECKPOINTS_KEPT_MAX,
    Checkpoint,
    Epoch,
    MigrationId,
    MigrationReason,
)
from coordinator.core.state import ClusterState
from tests.unit.test_core_rescale import W1, W2, built, cut, moving, step

BASE = 1 << 40  # generation 1's first offset, where `built` puts every build
POLICY = FallbackPolicy(after_failures=3, full_replay=True)


def hosted(m: int = 2) -> ClusterState:
    """A rescale to `m` partitions built; partition 0 ONLINE on w1 from its build."""
    s = moving(m)
    step(s, built(m))
    step(s, AssignPartitions(assignments=(Assignment(partition=0, owner=W1),), now_ms=21))
    step(s, PartitionOnline(partition=0, epoch=s.partitions[0].epoch, owner=W1, now_ms=22))
    return s


def report(s: ClusterState, offset: int, uri: str = "") -> None:
    epoch = s.partitions[0].epoch
    entry = CheckpointReport(
        partition=0, epoch=epoch, offset=offset, uri=uri or f"//w/0/{epoch}/o{offset}"
    )
    incarnation = s.workers[W1].incarnation
    step(s, RecordCheckpoints(worker_id=W1, incarnation=incarnation, entries=(entry,), now_ms=30))


def chain(s: ClusterState) -> list[tuple[int, str]]:
    p = s.partitions[0]
    assert p.checkpoint is not None
    return [(c.offset, c.uri) for c in (p.checkpoint, *p.earlier)]


def test_a_report_at_the_builds_offset_keeps_the_build_behind_it() -> None:
    s = hosted()
    epoch = s.partitions[0].epoch
    assert chain(s) == [(BASE, "//b0")]
    report(s, BASE)
    assert chain(s) == [(BASE, f"//w/0/{epoch}/o{BASE}"), (BASE, "//b0")]
    report(s, BASE)  # the same object again: nothing to keep twice
    assert chain(s) == [(BASE, f"//w/0/{epoch}/o{BASE}"), (BASE, "//b0")]
    report(s, BASE, uri="//other")  # another object of the same state replaces the current
    assert chain(s) == [(BASE, "//other"), (BASE, "//b0")]
    report(s, BASE + 5)  # the floor holds the state the one at its offset held
    assert chain(s) == [(BASE + 5, f"//w/0/{epoch}/o{BASE + 5}"), (BASE, "//b0")]


def test_a_full_chain_drops_its_oldest_checkpoint_above_the_floor() -> None:
    s = hosted()
    offsets = [BASE + i for i in range(1, CHECKPOINTS_KEPT_MAX + 3)]
    for offset in offsets:
        report(s, offset)
    kept = [o for o, _ in chain(s)]
    assert kept == [*offsets[::-1][:CHECKPOINTS_KEPT_MAX], BASE]
    assert chain(s)[-1] == (BASE, "//b0")


def test_every_later_checkpoint_lost_falls_back_to_the_build() -> None:
    s = hosted()
    for offset in (BASE, BASE + 1, BASE + 2, BASE + 3, BASE + 4):
        report(s, offset)
    step(s, RegisterWorker(worker_id=W1, address="h:1", now_ms=40))  # restarted: assigning
    targets = []
    while True:  # each one the store lost: the planner's decision, committed
        cmd = decide(s.partitions[0], 3, "lost", POLICY, 50, rescaled=True)
        if not isinstance(cmd, FallBack):
            break
        assert cmd.checkpoint is not None
        targets.append((cmd.checkpoint.offset, cmd.checkpoint.uri))
        step(s, cmd)
    assert [o for o, _ in targets] == [BASE + 3, BASE + 2, BASE]
    assert targets[-1] == (BASE, "//b0")
    assert isinstance(cmd, MarkStuck)  # the build itself lost too: an operator's turn
    # Hosted from the build again, the first report at its offset keeps it as the floor.
    epoch = s.partitions[0].epoch
    step(s, PartitionOnline(partition=0, epoch=epoch, owner=W1, now_ms=60))
    report(s, BASE, uri="//again")
    assert chain(s) == [(BASE, "//again"), (BASE, "//b0")]


def test_a_hand_off_and_the_next_rescales_cut_keep_the_floor() -> None:
    s = hosted()
    report(s, BASE)
    epoch = s.partitions[0].epoch
    move = Move(partition=0, source=W1, target=W2)
    step(s, PlanMigrations(moves=(move,), reason=MigrationReason.ADMIN, now_ms=40))
    mid = MigrationId("m-1")
    step(s, StartRelease(migration_id=mid, now_ms=41))
    final = FinalCheckpoint(offset=BASE, uri="//final", epoch=Epoch(epoch))
    step(s, HandOff(migration_id=mid, checkpoint=final, now_ms=42))
    assert chain(s) == [(BASE, "//final"), (BASE, "//b0")]
    epoch = s.partitions[0].epoch
    step(s, PartitionOnline(partition=0, epoch=epoch, owner=W2, now_ms=43))
    step(s, AssignPartitions(assignments=(Assignment(partition=1, owner=W1),), now_ms=44))
    step(s, PartitionOnline(partition=1, epoch=s.partitions[1].epoch, owner=W1, now_ms=44))
    step(s, FinishRescale(generation=1, now_ms=45))
    step(s, StartRescale(partitions=3, by="admin", now_ms=45))
    step(s, cut(0, epoch=epoch, offset=BASE + 9))
    assert chain(s) == [(BASE + 9, "//cut0"), (BASE, "//b0")]


def test_generation_zero_keeps_no_floor() -> None:
    """Without a rescale the chain ends in a full replay: a report at the current offset
    replaces it and a full chain drops its oldest."""
    old = Checkpoint(offset=7, uri="//a", epoch=Epoch(1), at_ms=1)
    new = Checkpoint(offset=7, uri="//b", epoch=Epoch(2), at_ms=2)
    s = moving()
    part = s.partitions[0]
    first = accept_checkpoint(part, old, rescaled=False)
    assert accept_checkpoint(first, new, rescaled=False).earlier == first.earlier
    assert accept_checkpoint(first, new, rescaled=True).earlier == (old,)
    full = first
    for offset in range(8, 8 + CHECKPOINTS_KEPT_MAX + 1):
        ck = Checkpoint(offset=offset, uri=f"//{offset}", epoch=Epoch(2), at_ms=3)
        full = accept_checkpoint(full, ck, rescaled=False)
    assert old not in full.earlier and len(full.earlier) == CHECKPOINTS_KEPT_MAX


def test_the_invariants_hold_every_command_to_the_floor() -> None:
    s = hosted()
    report(s, BASE)
    report(s, BASE + 3)
    before = view(s)
    part = s.partitions[0]
    # A command that lost the build from the chain: the step check names it.
    s.put_partition(replace(part, earlier=part.earlier[:-1]))
    cmd = RecordCheckpoints(worker_id=W1, incarnation=1, entries=(), now_ms=50)
    assert any("dropped p0's floor //b0" in v for v in step_violations(before, s, cmd))
    # Equal offsets are the current and the floor right behind it, in a rescaled table only.
    floor = Checkpoint(offset=BASE, uri="//b0", epoch=Epoch(1), at_ms=1)
    twin = Checkpoint(offset=BASE, uri="//twin", epoch=Epoch(3), at_ms=2)
    s.put_partition(replace(part, checkpoint=twin, earlier=(floor,)))
    assert state_violations(s) == []
    s.put_partition(replace(part, earlier=(twin, floor)))
    assert any("not newest first" in v for v in state_violations(s))
    s.routing = s.routing[-1:]  # as if generation 0's: no floor, no equal pair
    s.put_partition(replace(part, checkpoint=twin, earlier=(floor,)))
    assert any("not newest first" in v for v in state_violations(s))
