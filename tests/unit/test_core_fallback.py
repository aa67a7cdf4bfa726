"""The fallback chain: the pure decision (coordinator/core/fallback.py) and how ``apply``
validates and carries out FallBack, MarkStuck and ResetPartition, and keeps the bounded list
of earlier accepted checkpoints they walk down."""

from __future__ import annotations

import random

import pytest

from coordinator.core.commands import (
    CheckpointReport,
    Command,
    FallBack,
    FinalCheckpoint,
    HandOff,
    MarkStuck,
    PartitionOnline,
    RecordCheckpoints,
    RegisterWorker,
    ResetPartition,
    StartRelease,
)
from coordinator.core.effects import (
    CommitOutcome,
    HostCall,
    HostDone,
)
from coordinator.core.executor import commit_batch
from coordinator.core.fallback import (
    CHECKPOINT_UNAVAILABLE,
    FallbackPolicy,
    UnavailableCounts,
    decide,
    fallbacks_due,
    target_of,
)
from coordinator.core.model import (
    CHECKPOINTS_KEPT_MAX,
    ChangeReason,
    MigrationPhase,
    PartitionStatus,
)
from coordinator.core.planner import (
    Planner,
)
from coordinator.core.state import ClusterState
from tests.planner_base import quick_settings
from tests.unit.test_core_state import W1, W2, ok, plan, rejects
from tests.unit.test_core_state import s as s  # the fixture, re-exported for pytest

POLICY = FallbackPolicy(after_failures=3, full_replay=True)
NO_REPLAY = FallbackPolicy(after_failures=3, full_replay=False)


def report(s: ClusterState, offset: int, epoch: int = 1) -> None:
    entry = CheckpointReport(partition=0, epoch=epoch, offset=offset, uri=f"u{offset}")
    incarnation = s.workers[W1].incarnation
    value = ok(
        s, RecordCheckpoints(worker_id=W1, incarnation=incarnation, entries=(entry,), now_ms=50)
    )
    assert value["results"][0]["status"] == "accepted", value


def restart_w1(s: ClusterState) -> None:
    """w1's partitions go ASSIGNING at a new epoch, as after a worker restart."""
    ok(s, RegisterWorker(worker_id=W1, address="http://w1", now_ms=60))


def test_accepted_checkpoints_are_kept_newest_first_and_bounded(s: ClusterState) -> None:
    last = CHECKPOINTS_KEPT_MAX + 3
    for offset in range(1, last + 1):
        report(s, offset)
    report(s, last)  # the same offset again: nothing new to fall back to
    part = s.partitions[0]
    assert part.checkpoint is not None and part.checkpoint.offset == last
    assert [c.offset for c in part.earlier] == list(range(last - 1, 0, -1))[:CHECKPOINTS_KEPT_MAX]


def test_decide_waits_for_the_threshold_then_walks_the_chain(s: ClusterState) -> None:
    for offset in (5, 9, 14):
        report(s, offset)
    restart_w1(s)
    assert decide(s.partitions[0], 2, "gone", POLICY, 70) is None  # not yet
    chain = []
    while (cmd := decide(s.partitions[0], 3, "gone", POLICY, 70)) is not None:
        assert isinstance(cmd, FallBack)
        chain.append(None if cmd.checkpoint is None else cmd.checkpoint.offset)
        epoch, gen = s.partitions[0].epoch, s.generation
        assert ok(s, cmd)["epoch"] == epoch + 1
        part = s.partitions[0]
        assert part.status is PartitionStatus.ASSIGNING and s.generation == gen + 1
        last = part.history[-1]
        assert (last.reason, last.owner, last.epoch) == (ChangeReason.FALLBACK, W1, epoch + 1)
        assert "unavailable (gone)" in last.note
        assert len(chain) <= 3
    assert chain == [9, 5, None]
    assert s.partitions[0].checkpoint is None and s.partitions[0].earlier == ()
    # Reports of the replayed epoch are accepted again from offset 0.
    report(s, 2, epoch=s.partitions[0].epoch)


def test_without_full_replay_the_chain_ends_stuck_and_reset_clears_it(s: ClusterState) -> None:
    report(s, 5)
    restart_w1(s)
    cmd = decide(s.partitions[0], 3, "gone", NO_REPLAY, 70)
    assert isinstance(cmd, MarkStuck)
    gen = s.generation
    ok(s, cmd)
    part = s.partitions[0]
    assert "no lossless fallback" in part.stuck and s.generation == gen
    assert decide(part, 10, "gone", NO_REPLAY, 70) is None  # stuck: nothing more to decide
    epoch = part.epoch
    value = ok(s, ResetPartition(partition=0, note="reset by operator", now_ms=80))
    part = s.partitions[0]
    assert value == {"partition": 0, "epoch": epoch + 1}
    assert (part.stuck, part.checkpoint, part.earlier, part.owner) == ("", None, (), W1)
    assert part.history[-1].reason is ChangeReason.RESET


def test_online_clears_stuck(s: ClusterState) -> None:
    report(s, 5)
    restart_w1(s)
    ok(s, MarkStuck(partition=0, epoch=2, note="lost", now_ms=70))
    ok(s, PartitionOnline(partition=0, epoch=2, owner=W1, now_ms=71))
    assert s.partitions[0].stuck == ""


def test_fallback_is_validated_against_the_state(s: ClusterState) -> None:
    report(s, 5)
    report(s, 9)
    older = FinalCheckpoint(offset=5, uri="u5", epoch=1)
    # ONLINE: nothing to fall back from.
    rejects(s, FallBack(partition=0, epoch=1, checkpoint=older, note="x", now_ms=1), "conflict")
    restart_w1(s)
    for epoch, code in ((1, "stale_epoch"), (3, "conflict")):
        cmd = FallBack(partition=0, epoch=epoch, checkpoint=older, note="x", now_ms=1)
        rejects(s, cmd, code, "epoch")
    unknown = FinalCheckpoint(offset=5, uri="elsewhere", epoch=1)
    cmd = FallBack(partition=0, epoch=2, checkpoint=unknown, note="x", now_ms=1)
    rejects(s, cmd, "invalid", "checkpoint")
    rejects(s, FallBack(partition=0, epoch=2, checkpoint=older, note="", now_ms=1), "invalid")
    rejects(s, FallBack(partition=99, epoch=2, checkpoint=older, note="x", now_ms=1), "invalid")
    rejects(s, MarkStuck(partition=0, epoch=1, note="x", now_ms=1), "stale_epoch")
    # Partition 1 (w2's) is ONLINE: neither stuck nor reset applies to it.
    rejects(s, MarkStuck(partition=1, epoch=1, note="x", now_ms=1), "conflict")
    rejects(s, ResetPartition(partition=1, note="x", now_ms=1), "conflict", match="online")
    ok(s, FallBack(partition=0, epoch=2, checkpoint=older, note="x", now_ms=1))


def test_fallback_keeps_a_handed_off_migration_attached(s: ClusterState) -> None:
    report(s, 5)
    report(s, 9)
    (m1,) = plan(s, (0, W1, W2))
    ok(s, StartRelease(migration_id=m1, now_ms=40))
    ok(s, HandOff(migration_id=m1, checkpoint=None, now_ms=41))
    part = s.partitions[0]
    cmd = decide(part, 3, "gone", POLICY, 70)
    assert isinstance(cmd, FallBack) and cmd.checkpoint is not None
    ok(s, cmd)
    part = s.partitions[0]
    assert (part.owner, part.migration) == (W2, m1)
    ok(s, PartitionOnline(partition=0, epoch=part.epoch, owner=W2, now_ms=90))
    assert s.migrations[m1].phase is MigrationPhase.DONE


def test_policy_is_bounded() -> None:
    with pytest.raises(ValueError, match="after_failures"):
        FallbackPolicy(after_failures=0, full_replay=True)


def test_counts_need_failures_in_a_row_and_stay_bounded() -> None:
    counts = UnavailableCounts(keys_max=2)
    assert [counts.observe((0, 1), CHECKPOINT_UNAVAILABLE) for _ in range(2)] == [1, 2]
    assert counts.observe((0, 1), "timeout") == 0  # another failure breaks the row
    assert counts.observe((0, 1), CHECKPOINT_UNAVAILABLE) == 1
    counts.observe((1, 1), CHECKPOINT_UNAVAILABLE)
    counts.observe((2, 1), CHECKPOINT_UNAVAILABLE)  # a third key evicts the longest idle
    assert counts.observe((0, 1), CHECKPOINT_UNAVAILABLE) == 1
    assert counts.observe((2, 1), CHECKPOINT_UNAVAILABLE) == 2


def test_fallbacks_due_once_per_row_and_not_for_old_epochs(s: ClusterState) -> None:
    report(s, 5)
    report(s, 9)
    restart_w1(s)
    counts = UnavailableCounts()

    def fail(epoch: int, error: str = CHECKPOINT_UNAVAILABLE) -> list[FallBack | MarkStuck]:
        counts.observe((0, epoch), error, "NoSuchKey")
        return fallbacks_due(s.partitions, counts, POLICY, 70)

    assert fail(2) == [] and fail(2) == []
    assert fail(1) == [] and fail(1) == [] and fail(1) == []  # an old epoch's calls
    (cmd,) = fail(2)
    assert isinstance(cmd, FallBack) and target_of(cmd) == "checkpoint"
    assert "NoSuchKey" in cmd.note and cmd.epoch == 2
    assert fail(2) == []  # the row starts again after a decision
    assert target_of(MarkStuck(partition=0, epoch=2, note="x", now_ms=1)) == "stuck"
    replay = FallBack(partition=0, epoch=2, checkpoint=None, note="x", now_ms=1)
    assert target_of(replay) == "replay"


def test_the_planner_walks_the_chain_on_checkpoint_unavailable(s: ClusterState) -> None:
    """The production planner: its host calls fail with checkpoint_unavailable, it plans a
    FallBack after `fallback_after_failures`, and the next host call carries the older
    checkpoint, then none (a full replay)."""
    report(s, 5)
    report(s, 9)
    restart_w1(s)
    settings = quick_settings(
        total_partitions=len(s.partitions),
        suspect_after_ms=10**9,
        dead_after_ms=2 * 10**9,
        fallback_after_failures=2,
    )
    planner = Planner(settings, random.Random(7), s, 0)
    now = 0
    sent: list[int | None] = []
    committed: list[Command] = []
    for _ in range(12):
        now += 60_000  # past any retry backoff
        batch = planner.plan(s, now, now)

        def commit(cmd: Command) -> CommitOutcome:
            assert isinstance(ok(s, cmd), dict)
            committed.append(cmd)
            return CommitOutcome.OK

        calls = [
            c
            for c in commit_batch(planner, batch, commit, now).calls()
            if isinstance(c, HostCall) and c.partition == 0
        ]
        for call in calls:
            sent.append(None if call.checkpoint is None else call.checkpoint.offset)
            ok_ = call.checkpoint is None  # only a replay from offset 0 loads
            code = None if ok_ else CHECKPOINT_UNAVAILABLE
            planner.on_result(HostDone(call=call, ok=ok_, code=code, message="gone"), now, now)
        for other in batch.calls:
            if isinstance(other, HostCall) and other.partition != 0:
                planner.on_result(HostDone(call=other, ok=True), now, now)
    assert sent[:5] == [9, 9, 5, 5, None]
    falls = [c for c in committed if isinstance(c, FallBack)]
    assert [None if c.checkpoint is None else c.checkpoint.offset for c in falls] == [5, None]
    assert s.partitions[0].status is PartitionStatus.ONLINE


def test_a_rescaled_table_never_replays_from_zero(s: ClusterState) -> None:
    """A rescale's partition starts from its build's state: the chain ends stuck, and apply
    refuses a full-replay FallBack and an operator's reset alike (nothing else changes)."""
    s.routing = (*s.routing, s.total_partitions)  # as a rescale's StatesBuilt leaves it
    report(s, 5)
    restart_w1(s)
    assert decide(s.partitions[0], 3, "gone", POLICY, 70, rescaled=False) is not None
    cmd = decide(s.partitions[0], 3, "gone", POLICY, 70, rescaled=True)
    assert isinstance(cmd, MarkStuck) and "replays only from its build" in cmd.note
    part = s.partitions[0]
    replay = FallBack(partition=0, epoch=part.epoch, checkpoint=None, note="x", now_ms=70)
    rejects(s, replay, "rescaled", None, match="cannot fall back to a full replay")
    rejects(s, ResetPartition(partition=0, note="x", now_ms=80), "rescaled", None, match="reset")
    assert s.partitions[0] == part
