"""The pure planner: one batch at a time, decisions from the applied state and its memory.

The scenario files (tests/unit/testdata/planner) cover the decisions case by case; these
tests pin the batch contract itself and the failover rule.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.commands import (
    AbortMigration,
    AssignPartitions,
    Bootstrap,
    Command,
    DeclareDead,
    DrainWorker,
    Ok,
    PartitionOnline,
    PlanMigrations,
    RegisterWorker,
)
from coordinator.core.effects import (
    CheckpointCall,
    CheckpointDone,
    CommitOutcome,
    HostCall,
    HostDone,
    ReleaseCall,
    ReleaseDone,
    ReleaseOutcome,
)
from coordinator.core.executor import commit_batch
from coordinator.core.invariants import state_violations, step_violations, view
from coordinator.core.model import (
    OWNING_WORKER_STATES,
    MigrationReason,
    PartitionStatus,
    WorkerId,
    WorkerState,
)
from coordinator.core.planner import (
    Planner,
    PlannerSettings,
)
from coordinator.core.state import ClusterState, apply
from tests.planner_base import quick_settings

W1, W2 = WorkerId("w1"), WorkerId("w2")
_ids = itertools.count()
SETTINGS = quick_settings(total_partitions=4, suspect_after_ms=1_000, dead_after_ms=3_000)


def run(s: ClusterState, planner: Planner, now: int) -> list[object]:
    """Commit every batch's commands until the next batch would have none; return them."""
    done: list[object] = []
    for _ in range(20):
        if not commands_due(s, planner, now):
            return done
        batch = planner.plan(s, now, now)
        assert batch.wake_at_ms == now and batch.calls == ()

        def commit(cmd: Command) -> CommitOutcome:
            before = view(s)
            result = apply(s, f"r{next(_ids)}", cmd)
            done.append(cmd)
            assert result.__class__.__name__ == "Ok", result
            assert step_violations(before, s, cmd) + state_violations(s) == []
            return CommitOutcome.OK

        commit_batch(planner, batch, commit, now)
    raise AssertionError("planner did not settle")


def commands_due(s: ClusterState, planner: Planner, now: int) -> bool:
    """Would plan() return commands now? Asked of a copy, so no call is handed out."""
    import copy

    return bool(copy.deepcopy(planner).plan(s, now, now).commands)


def with_w1_assigned(settings: PlannerSettings) -> tuple[ClusterState, Planner]:
    """A bootstrapped cluster whose one worker W1 was just given every partition."""
    s = ClusterState()
    planner = Planner(settings, random.Random(1), s, 0)
    run(s, planner, 0)
    apply(s, "r", RegisterWorker(worker_id=W1, address="http://w1", now_ms=0))
    planner.registered(W1, 0)
    run(s, planner, 0)
    return s, planner


def quiet(total: int, calls_max: int = 64) -> PlannerSettings:
    """Liveness far out of the way; one checkpoint round a second."""
    return quick_settings(
        total_partitions=total,
        suspect_after_ms=1_000_000,
        dead_after_ms=3_000_000,
        checkpoint_interval_ms=1_000,
        calls_max=calls_max,
    )


def test_bootstrap_then_assign_then_host_then_online() -> None:
    s = ClusterState()
    planner = Planner(SETTINGS, random.Random(1), s, 0)
    assert [type(c) for c in run(s, planner, 0)] == [Bootstrap]
    for w in (W1, W2):
        apply(s, w, RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=0))
        planner.registered(w, 0)
    assert [type(c) for c in run(s, planner, 10)] == [AssignPartitions]
    batch = planner.plan(s, 20, 20)
    hosts = [c for c in batch.calls if isinstance(c, HostCall)]
    assert sorted(c.partition for c in hosts) == [0, 1, 2, 3]
    assert batch.wake_at_ms == 20 + SETTINGS.tick_ms
    # A call in flight is not handed out twice.
    assert not [c for c in planner.plan(s, 30, 30).calls if isinstance(c, HostCall)]
    for c in hosts:
        planner.on_result(HostDone(call=c, ok=True), 40, 40)
    online = run(s, planner, 50)
    assert all(isinstance(c, PartitionOnline) for c in online) and len(online) == 4
    assert all(p.status is PartitionStatus.ONLINE for p in s.partitions)


def test_a_fresh_planner_seeds_liveness_and_kills_nobody_at_takeover() -> None:
    s = ClusterState()
    first = Planner(SETTINGS, random.Random(1), s, 0)
    run(s, first, 0)
    for w in (W1, W2):
        apply(s, w, RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=0))
        first.registered(w, 0)
    run(s, first, 0)
    # A new leader long after the last heartbeat anyone saw: nobody is declared dead...
    second = Planner(SETTINGS, random.Random(2), s, 1_000_000)
    assert run(s, second, 1_000_000 + SETTINGS.dead_after_ms) == []
    # ...until they stay silent past the timeout counted from the takeover.
    second.heartbeat(W1, 0.1, 1_000_000 + SETTINGS.dead_after_ms)
    dead = run(s, second, 1_000_001 + SETTINGS.dead_after_ms)
    assert [type(c) for c in dead] == [DeclareDead]
    assert isinstance(dead[0], DeclareDead) and dead[0].worker_ids == (W2,)


def test_a_rejected_command_skips_the_rest_and_keeps_the_host_retry() -> None:
    s, planner = with_w1_assigned(SETTINGS)
    calls = [c for c in planner.plan(s, 1, 1).calls if isinstance(c, HostCall)]
    planner.on_result(HostDone(call=calls[0], ok=False, code="busy"), 2, 2)
    planner.on_result(HostDone(call=calls[1], ok=True), 2, 2)
    batch = planner.plan(s, 3, 3)
    assert len(batch.commands) == 1
    planner.committed(batch.commands[0], CommitOutcome.UNKNOWN, 3)
    # Both keys now wait for their backoff instead of being called again at once.
    again = {c.partition for c in planner.plan(s, 4, 4).calls if isinstance(c, HostCall)}
    assert calls[0].partition not in again and calls[1].partition not in again


def test_a_stage_repeating_a_no_op_does_not_starve_the_calls() -> None:
    """Rule 4 of the batch: a stage that commits a no-op DrainWorker every batch must not
    keep out the host call that would finish its work."""
    s, planner = with_w1_assigned(SETTINGS)
    noop = (RegisterWorker(worker_id=W1, address="http://w1", now_ms=5),)
    planner._drains = lambda *_: noop  # type: ignore[method-assign]
    hosts: list[HostCall] = []
    for now in range(10, 16):
        run = commit_batch(planner, planner.plan(s, now, now), lambda _: CommitOutcome.OK, now)
        hosts += [c for c in run.calls() if isinstance(c, HostCall)]
    assert sorted(c.partition for c in hosts) == [0, 1, 2, 3]
    assert planner.repeats_skipped >= 2


def test_a_checkpoint_round_refused_by_the_call_cap_is_asked_for_in_the_heartbeat() -> None:
    """With the in-flight cap full (host calls after a failover, say) a due checkpoint
    request cannot go out; the round is not lost for an interval: the worker's next
    heartbeat reply carries checkpoint_due instead."""
    s, planner = with_w1_assigned(quiet(4, calls_max=4))
    # The first plan hands out the four host calls (the cap) and staggers W1's first round.
    first = planner.plan(s, 1, 1)
    assert len([c for c in first.calls if isinstance(c, HostCall)]) == 4
    assert not planner.heartbeat(W1, 0.1, 2)
    # Once a round is due, the cap (still full: no host reply yet) refuses the call...
    batch = planner.plan(s, 10_000, 10_000)
    assert not [c for c in batch.calls if isinstance(c, CheckpointCall)]
    # ...and the heartbeat reply asks for the checkpoint, once.
    assert planner.heartbeat(W1, 0.1, 10_001)
    assert not planner.heartbeat(W1, 0.1, 10_002)


def test_a_checkpoint_call_still_in_flight_is_not_asked_for_twice() -> None:
    s, planner = with_w1_assigned(quiet(1))
    planner.plan(s, 1, 1)  # staggers the first round
    sent = [c for c in planner.plan(s, 5_000, 5_000).calls if isinstance(c, CheckpointCall)]
    assert len(sent) == 1
    # The next round comes due while that call is still out: no second call, no heartbeat ask.
    later = planner.plan(s, 20_000, 20_000)
    assert not [c for c in later.calls if isinstance(c, CheckpointCall)]
    assert not planner.heartbeat(W1, 0.1, 20_001)


def test_every_worker_gets_one_checkpoint_round_per_interval() -> None:
    """The rounds come from a heap of due times, not a scan of every worker: each worker is
    still asked once per interval (its first round staggered), one that goes quiet is asked
    again as soon as it is heard from, and the heap holds one live entry per worker."""
    settings = replace(quiet(1), suspect_after_ms=1_500, dead_after_ms=1_000_000)
    s, planner = with_w1_assigned(settings)
    workers = [W1, *(WorkerId(f"w{i:02d}") for i in range(30))]
    for w in workers[1:]:
        assert isinstance(
            apply(s, f"r-{w}", RegisterWorker(worker_id=w, address="x", now_ms=0)), Ok
        )
        planner.registered(w, 0)
    quiet_one, leaver = workers[7], workers[9]
    calls: dict[WorkerId, list[int]] = {w: [] for w in workers}
    for now in range(1, 10_001, 100):
        if now == 4_001:  # it owns nothing: it drains and leaves at once
            left = apply(s, "leave", DrainWorker(worker_id=leaver, moves=(), now_ms=now))
            assert isinstance(left, Ok) and s.workers[leaver].state is WorkerState.LEFT
            workers.remove(leaver)
        for w in workers:
            if w != quiet_one or not 3_000 <= now < 6_000:
                planner.heartbeat(w, 0.1, now)
        for c in planner.plan(s, now, now).calls:
            if isinstance(c, CheckpointCall):
                calls[c.worker_id].append(now)
                planner.on_result(CheckpointDone(call=c, ok=True), now, now)
        assert set(planner.rounds.next_ms) == set(workers)
        assert len(planner.rounds.due) <= 2 * len(workers)
    # Its round ended with it: nothing after it left (its heap entry is stale).
    assert calls[leaver] and max(calls[leaver]) < 4_001, calls[leaver]
    for w in workers:
        gaps = [b - a for a, b in itertools.pairwise(calls[w])]
        assert calls[w] and calls[w][0] <= 1_101, (w, calls[w])
        if w != quiet_one:
            assert len(calls[w]) in (9, 10) and all(g == 1_000 for g in gaps), (w, calls[w])
    # Quiet from 3,000 (suspected after 1,500 more): its due round waits, and is asked for
    # on the first scan after it is heard from again.
    asked = calls[quiet_one]
    assert not [t for t in asked if 4_600 <= t < 6_000], asked
    assert any(6_000 <= t <= 6_101 for t in asked), asked


def test_the_planner_forgets_rounds_and_retries_of_what_ended() -> None:
    """Its memory is bounded by what is live: a worker that LEFT loses its checkpoint round,
    and a migration aborted after a failed release loses its retry schedule."""
    s, planner = with_w1_assigned(quiet(1))

    def commit(cmd: Command) -> None:
        assert isinstance(apply(s, f"r{next(_ids)}", cmd), Ok)

    commit(RegisterWorker(worker_id=W2, address="http://w2", now_ms=0))
    planner.registered(W2, 0)
    planner.plan(s, 1, 1)  # staggers both workers' first rounds
    assert set(planner.rounds.next_ms) == {W1, W2}
    # A migration W1 -> W2 whose release fails, then is aborted.
    moves = planner.plan_reassign(s, 2, balance=False, moves=[(0, W2)])
    assert isinstance(moves, tuple)
    commit(PlanMigrations(moves=moves, reason=MigrationReason.ADMIN, now_ms=2))
    (start,) = planner.plan(s, 3, 3).commands
    commit(start)
    planner.committed(start, CommitOutcome.OK, 3)
    (release,) = [c for c in planner.plan(s, 4, 4).calls if isinstance(c, ReleaseCall)]
    planner.on_result(ReleaseDone(call=release, outcome=ReleaseOutcome.FAILED), 5, 5)
    assert planner.release_retry.pending() == [release.migration_id]
    commit(AbortMigration(migration_id=release.migration_id, note="operator", now_ms=6))
    # W2 (owning nothing) drains and leaves.
    commit(DrainWorker(worker_id=W2, moves=(), now_ms=7))
    assert s.workers[W2].state is WorkerState.LEFT
    planner.plan(s, 5_000, 5_000)
    assert set(planner.rounds.next_ms) == {W1}
    assert planner.release_retry.pending() == []


def test_the_dead_who_own_nothing_get_no_placement_pass() -> None:
    """A storm of dead workers that own nothing is declared without reading every ACTIVE
    worker's liveness; a dead owner's partitions are placed on the living."""
    s, planner = with_w1_assigned(SETTINGS)  # W1 owns every partition
    idle = [WorkerId(f"idle{i}") for i in range(3)]
    for w in idle:
        apply(s, w, RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=0))
        planner.registered(w, 0)
    passes = 0
    eligible = planner.moves.eligible

    def counting(*args: object, **kw: object) -> list[WorkerId]:
        nonlocal passes
        passes += 1
        return eligible(*args, **kw)  # type: ignore[arg-type]

    planner.moves.eligible = counting  # type: ignore[method-assign]
    late = SETTINGS.dead_after_ms + 1
    planner.heartbeat(W1, 0.1, late)
    declared = planner._detect_failures(s, late, late)
    assert declared == (DeclareDead(worker_ids=tuple(idle), assignments=(), now_ms=late),)
    assert passes == 0
    apply(s, "dead-idle", declared[0])
    planner.committed(declared[0], CommitOutcome.OK, late)

    apply(s, W2, RegisterWorker(worker_id=W2, address="http://w2", now_ms=late))
    planner.registered(W2, late)
    later = late + SETTINGS.dead_after_ms + 1
    planner.heartbeat(W2, 0.1, later)
    (dead_w1,) = planner._detect_failures(s, later, later)
    assert isinstance(dead_w1, DeclareDead) and dead_w1.worker_ids == (W1,)
    assert {(a.partition, a.owner) for a in dead_w1.assignments} == {(p, W2) for p in range(4)}
    assert passes == 1


POOL = [WorkerId(f"p{i}") for i in range(6)]
_steps = st.tuples(
    st.sampled_from(["register", "dead", "leave", "quiet", "fail", "plan"]),
    st.sampled_from(POOL),
    st.integers(1, 400),
)


@settings(max_examples=120, deadline=None)
@given(steps=st.lists(_steps, max_size=60))
def test_checkpoint_rounds_follow_the_owning_set_by_its_changes(
    steps: list[tuple[str, WorkerId, int]],
) -> None:
    """A scan reads only the workers that started or stopped owning since the last one
    (ClusterState.owning_changes_since). Against a planner made to read the whole owning set
    at every scan: the same calls, in the same order, and the same rounds, through
    joins, deaths, departures, re-registrations, silences and failed calls."""
    s = ClusterState()
    assert isinstance(apply(s, "b", Bootstrap(total_partitions=1, now_ms=0)), Ok)
    settings_ = replace(quiet(1), min_cluster_size=1_000, suspect_after_ms=150)
    by_changes = Planner(settings_, random.Random(7), s, 0)
    whole_set = Planner(settings_, random.Random(7), s, 0)
    now, quiet_ones = 0, set[WorkerId]()
    for i, (kind, wid, dt) in enumerate(steps):
        now += dt
        worker = s.workers.get(wid)
        owning = worker is not None and worker.state in OWNING_WORKER_STATES
        if kind == "register":
            assert isinstance(
                apply(s, f"r{i}", RegisterWorker(worker_id=wid, address="a", now_ms=now)), Ok
            )
            for p in (by_changes, whole_set):
                p.registered(wid, now)
            quiet_ones.discard(wid)
        elif kind == "dead" and owning:
            assert isinstance(
                apply(s, f"r{i}", DeclareDead(worker_ids=(wid,), assignments=(), now_ms=now)), Ok
            )
        elif kind == "leave" and owning:
            assert isinstance(
                apply(s, f"r{i}", DrainWorker(worker_id=wid, moves=(), now_ms=now)), Ok
            )
        elif kind == "quiet":
            quiet_ones.symmetric_difference_update({wid})
        elif kind == "fail":  # a checkpoint call that did not get through
            call = CheckpointCall(worker_id=wid, address="a", incarnation=1)
            for p in (by_changes, whole_set):
                p.on_result(CheckpointDone(call=call, ok=False), now, now)
        for w in s.workers:
            if w not in quiet_ones:
                for p in (by_changes, whole_set):
                    p.heartbeat(w, 0.1, now)
        if kind == "plan":
            whole_set.rounds.cursor = None  # read the whole owning set, as every scan did
            scanned = now >= by_changes.rounds.scan_at_ms
            got = by_changes.plan(s, now, now).calls
            want = whole_set.plan(s, now, now).calls
            assert got == want
            for p in (by_changes, whole_set):
                for c in got:
                    p.on_result(CheckpointDone(call=c, ok=True), now, now)
            assert by_changes.rounds.next_ms == whole_set.rounds.next_ms
            assert by_changes.rounds.fresh == whole_set.rounds.fresh
            assert by_changes.rounds.missed == whole_set.rounds.missed
            if scanned:  # every owning worker has a round or waits for its first
                owning_now = s.worker_set(*OWNING_WORKER_STATES)
                assert set(by_changes.rounds.next_ms) | by_changes.rounds.fresh == owning_now
