"""The leader's warm-up decisions (coordinator/core/warmups.py) and the worker's warm copies
(pipeline/warming.py): bounds, deadlines, refusals, and when a host starts from a copy."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

import pytest

from coordinator.core.commands import FinalizeVersion, Move, Ok, PlanMigrations, StartWarm
from coordinator.core.effects import WarmCall, WarmDone
from coordinator.core.model import (
    Migration,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionId,
    WorkerId,
)
from coordinator.core.planner import Planner
from coordinator.core.state import ClusterState, apply
from coordinator.core.warmups import WarmOutcome, WarmPolicy, WarmUps
from pipeline.holdings import Holdings
from pipeline.settings import WARM_COPY_IDLE_S_DEFAULT
from pipeline.state import KeyState
from pipeline.warming import Warming
from shared.clock import Clock, FakeClock
from shared.errors import ErrorKind, RequestError, UnavailableError
from shared.messages.warm import WarmReply, WarmRequest
from shared.system_clock import SYSTEM_CLOCK
from tests.planner_base import quick_settings

POLICY = WarmPolicy(
    enabled=True, timeout_ms=1_000, lag_records_max=10, in_flight_max=3, per_worker_max=2
)


def mig(n: int, target: str, phase: MigrationPhase = MigrationPhase.PLANNED) -> Migration:
    return Migration(
        migration_id=MigrationId(f"m-{n}"),
        partition=PartitionId(n),
        source=WorkerId("src"),
        target=WorkerId(target),
        phase=phase,
        reason=MigrationReason.ADMIN,
        created_at_ms=0,
        updated_at_ms=0,
        note="",
    )


def done(x: Migration, **kw: object) -> WarmDone:
    call = WarmCall(
        migration_id=x.migration_id,
        partition=x.partition,
        worker_id=x.target,
        address="http://127.0.0.1:1",
        incarnation=1,
        checkpoint=None,
    )
    return WarmDone(call=call, **kw)  # type: ignore[arg-type]


def test_starts_keep_the_per_worker_and_cluster_bounds() -> None:
    w = WarmUps(POLICY)
    warming = [mig(0, "a", MigrationPhase.WARMING)]
    planned = [mig(1, "a"), mig(2, "a"), mig(3, "b"), mig(4, "c")]
    # "a" has one warming already (room for one more); the cluster has room for two more.
    assert [x.migration_id for x in w.starts(planned, warming)] == ["m-1", "m-3"]


def test_a_warm_up_ends_warm_within_the_lag_bound_and_not_before() -> None:
    w = WarmUps(POLICY)
    x = mig(1, "a", MigrationPhase.WARMING)
    assert w.releasable([x], 0) == [] and w.poll_due(x.migration_id, 0)
    w.observe(done(x, ok=True), 0)  # still loading
    assert w.releasable([x], 100) == [] and not w.poll_due(x.migration_id, 100)
    w.observe(done(x, ok=True, loaded=True, offset=100, head=200), 500)
    assert w.releasable([x], 500) == [] and w.lag(x.migration_id) == 100
    w.observe(done(x, ok=True, loaded=True, offset=195, head=205), 1000)
    assert w.releasable([x], 999) == [x.migration_id]
    assert w.outcome(x.migration_id) is WarmOutcome.WARM and w.outcomes[WarmOutcome.WARM] == 1


def test_a_refusal_ends_it_cold_and_no_answer_does_not() -> None:
    w = WarmUps(POLICY)
    x, y = mig(1, "a", MigrationPhase.WARMING), mig(2, "b", MigrationPhase.WARMING)
    w.releasable([x, y], 0)
    w.observe(done(x, ok=False), 0)  # unreachable: its liveness decides
    w.observe(done(y, ok=False, code="warm_refused"), 0)
    assert w.releasable([x, y], 10) == [y.migration_id]
    assert w.outcome(y.migration_id) is WarmOutcome.REFUSED


def test_the_deadline_ends_it_cold_and_counts_from_when_this_leader_saw_it() -> None:
    w = WarmUps(POLICY)
    x = mig(1, "a", MigrationPhase.WARMING)
    assert w.releasable([x], 5_000) == []  # first seen now: a fresh leader's deadline
    assert w.releasable([x], 5_999) == []
    assert w.releasable([x], 6_000) == [x.migration_id]
    assert w.outcome(x.migration_id) is WarmOutcome.TIMED_OUT
    assert w.releasable([], 6_001) == [] and w.outcome(x.migration_id) is None  # forgotten


def _planned_cluster(finalized: int, partitions: int = 1) -> ClusterState:
    from coordinator.core.commands import Bootstrap, RegisterWorker, ReportVersions

    s = ClusterState()
    cmds: list[object] = [
        ReportVersions(
            node_id="n1", min_version=1, max_version=finalized, package_version="t", now_ms=0
        ),
        Bootstrap(total_partitions=partitions, now_ms=0),
        RegisterWorker(worker_id=WorkerId("a"), address="http://127.0.0.1:1", now_ms=0),
        RegisterWorker(worker_id=WorkerId("b"), address="http://127.0.0.1:2", now_ms=0),
    ]
    if finalized > 1:
        cmds.insert(1, FinalizeVersion(version=finalized, voters=("n1",), now_ms=0))
    for i, cmd in enumerate(cmds):
        assert isinstance(apply(s, f"r{i}", cmd), Ok)  # type: ignore[arg-type]
    return s


def _moving_cluster(finalized: int, partitions: int = 1) -> ClusterState:
    """`_planned_cluster` with every partition online on a and a PLANNED move of each to b."""
    from coordinator.core.commands import Assignment, AssignPartitions, PartitionOnline

    s = _planned_cluster(finalized, partitions)
    a, b = WorkerId("a"), WorkerId("b")
    ps = [PartitionId(p) for p in range(partitions)]
    assign = AssignPartitions(
        assignments=tuple(Assignment(partition=p, owner=a) for p in ps), now_ms=0
    )
    assert isinstance(apply(s, "assign", assign), Ok)
    for i, cmd in enumerate(
        [
            *(
                PartitionOnline(partition=p, epoch=s.partitions[p].epoch, owner=a, now_ms=0)
                for p in ps
            ),
            PlanMigrations(
                moves=tuple(Move(partition=p, source=a, target=b) for p in ps),
                reason=MigrationReason.ADMIN,
                now_ms=0,
            ),
        ]
    ):
        assert isinstance(apply(s, f"x{i}", cmd), Ok)  # type: ignore[arg-type]
    return s


@pytest.mark.parametrize(("finalized", "warm"), [(1, False), (2, False), (3, True)])
def test_moves_stay_cold_until_the_cluster_speaks_start_warm(finalized: int, warm: bool) -> None:
    s = _moving_cluster(finalized)
    settings = quick_settings(total_partitions=1, warm=POLICY)
    batch = Planner(settings, random.Random(0), s, 0).plan(s, 0, 0)
    assert [type(c) is StartWarm for c in batch.commands] == [warm], batch


def test_a_leader_with_warm_moves_off_releases_a_warming_migration_cold() -> None:
    """A leader whose settings turn warm moves off (the cluster file changed) still moves
    what a previous leader left WARMING: it releases at once instead of waiting forever."""
    from coordinator.core.commands import StartRelease

    s = _moving_cluster(3)
    (m,) = s.in_flight_migrations()
    assert isinstance(apply(s, "w", StartWarm(migration_id=m.migration_id, now_ms=0)), Ok)
    batch = Planner(quick_settings(total_partitions=1), random.Random(0), s, 0).plan(s, 0, 0)
    assert [c for c in batch.commands if isinstance(c, (StartRelease, StartWarm))] == [
        StartRelease(migration_id=m.migration_id, now_ms=0)
    ], batch


def test_warm_calls_hold_at_most_half_the_leaders_call_slots() -> None:
    """A target holds a warm call's answer for up to a micro-batch: with every WARMING
    target asked at once, warm calls take half the in-flight cap, and the rest stays free
    for host, release and checkpoint calls."""
    s = _moving_cluster(3, partitions=6)
    for x in s.in_flight_migrations():
        assert isinstance(
            apply(s, f"w{x.partition}", StartWarm(migration_id=x.migration_id, now_ms=0)), Ok
        )
    policy = dataclasses.replace(
        POLICY, timeout_ms=60_000, lag_records_max=10_000, in_flight_max=8, per_worker_max=8
    )
    settings = quick_settings(total_partitions=6, warm=policy, calls_max=4)
    planner = Planner(settings, random.Random(0), s, 0)
    warm = [c for c in planner.plan(s, 0, 0).calls if isinstance(c, WarmCall)]
    assert len(warm) == 2, warm  # half of 4
    # Nothing answered yet: the next round asks no more.
    assert not [c for c in planner.plan(s, 1, 1).calls if isinstance(c, WarmCall)]


# -- the worker's warm copies ----------------------------------------------------------------


class _NoLoads:
    def load_sent(self, *_: object) -> object:
        raise AssertionError("no checkpoint is sent in these tests")


def _warming(
    copies_max: int = 2, clock: Clock = SYSTEM_CLOCK, idle_s: float = WARM_COPY_IDLE_S_DEFAULT
) -> tuple[Warming, Holdings]:
    holdings = Holdings()
    loads: Any = _NoLoads()
    return Warming(holdings, loads, copies_max=copies_max, idle_s=idle_s, clock=clock), holdings


def _ks(v: float, offset: int) -> KeyState:
    return KeyState.of(v, offset)


def test_a_warm_copy_follows_the_log_and_a_host_starts_from_it_once_caught_up() -> None:
    async def go() -> None:
        w, _ = _warming()
        req = WarmRequest(partition=3, migration_id="m-1")
        assert w.warm(req) == WarmReply(partition=3, loaded=False, offset=0, head=0)
        await w.loads_done()  # the load (nothing sent: offset 0)
        assert w.offsets() == {3: 0}
        # Loaded, but no micro-batch has replayed into it yet: not reported loaded, so the
        # checkpoint's offset cannot pass for a lag of 0, nor a listed tail for a replayed one.
        assert w.warm(req) == WarmReply(partition=3, loaded=False, offset=0, head=0)
        w.saw_head(3, 9)
        assert w.warm(req) == WarmReply(partition=3, loaded=False, offset=0, head=9)
        assert w.merge(3, 0, 5, 9, {"k": _ks(1.0, 0)}, 100) == 1
        assert w.warm(req) == WarmReply(partition=3, loaded=True, offset=5, head=9)
        assert w.merge(3, 4, 9, 9, {"k": _ks(2.0, 4)}, 100) == 0  # not where it started
        # Behind the log's end and behind the sent checkpoint: not used.
        copy = w.take(3, 7)
        assert copy is None and w.copies == {}
        w.warm(req)
        await w.loads_done()
        w.merge(3, 0, 9, 9, {"k": _ks(1.0, 0)}, 100)  # reached the head it listed
        copy = w.take(3, 50)
        assert copy is not None and copy.offset == 9 and copy.state["k"].count == 1

    asyncio.run(go())


def test_a_warm_copy_the_leader_stops_asking_about_is_dropped_after_idle_s() -> None:
    async def go() -> None:
        clock = FakeClock()
        w, _ = _warming(clock=clock, idle_s=30.0)
        w.warm(WarmRequest(partition=1, migration_id="m-1"))
        w.warm(WarmRequest(partition=2, migration_id="m-2"))
        await w.loads_done()
        clock.advance(20_000)
        w.warm(WarmRequest(partition=2, migration_id="m-2"))  # asked again: its idle restarts
        clock.advance(10_000)
        w.expire()
        assert set(w.copies) == {1, 2}  # 30 s exactly is not past the bound
        clock.advance(1)
        w.expire()
        assert set(w.copies) == {2} and w.stats["dropped"] == 1
        clock.advance(20_000)
        w.expire()
        assert w.copies == {}

    asyncio.run(go())


def test_warm_copies_are_bounded_refused_when_hosted_and_end_rather_than_dead_letter() -> None:
    async def go() -> None:
        w, holdings = _warming(copies_max=1)
        w.warm(WarmRequest(partition=1, migration_id="m-1"))
        with pytest.raises(UnavailableError) as full:
            w.warm(WarmRequest(partition=2, migration_id="m-2"))
        assert full.value.code == "warm_refused"
        from pipeline.holdings import PartitionRuntime

        holdings.parts[2] = PartitionRuntime(epoch=1)
        with pytest.raises(RequestError) as hosted:
            w.warm(WarmRequest(partition=2, migration_id="m-2"))
        assert hosted.value.kind is ErrorKind.CONFLICT
        await w.loads_done()
        two = {"a": _ks(1.0, 0), "b": _ks(1.0, 1)}
        assert w.merge(1, 0, 2, 2, two, 1) == 0  # one key over the limit: the copy ends
        with pytest.raises(UnavailableError) as failed:
            w.warm(WarmRequest(partition=1, migration_id="m-1"))
        assert failed.value.code == "warm_failed" and w.copies == {}

    asyncio.run(go())


def test_a_warm_copy_with_nothing_to_replay_is_loaded_once_a_batch_lists_its_log() -> None:
    async def go() -> None:
        w, _ = _warming()
        req = WarmRequest(partition=5, migration_id="m-1")
        w.warm(req)
        await w.loads_done()  # the load (nothing sent: offset 0)
        assert w.warm(req).loaded is False
        w.saw_head(5, 0)  # the log holds nothing past the copy
        assert w.warm(req) == WarmReply(partition=5, loaded=True, offset=0, head=0)

    asyncio.run(go())


def test_a_held_warm_call_is_answered_at_the_copys_next_step() -> None:
    """Once the copy is loaded, a call with `hold_s` is answered when the next micro-batch
    steps the copy (merged records, or found nothing new), when the copy is taken or
    dropped, or when `hold_s` passes; before the load, and without a hold, at once."""

    async def go() -> None:
        w, _ = _warming()
        held = WarmRequest(partition=3, migration_id="m-1", hold_s=5.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await w.answer(held)).loaded is False  # not loaded yet: at once
        await w.loads_done()
        w.merge(3, 0, 5, 5, {"k": _ks(1.0, 0)}, 100)
        assert loop.time() - started < 1.0
        plain = WarmRequest(partition=3, migration_id="m-1")
        assert await w.answer(plain) == WarmReply(partition=3, loaded=True, offset=5, head=5)

        waiting = asyncio.ensure_future(w.answer(held))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # held for the next step
        w.merge(3, 5, 9, 9, {"k": _ks(2.0, 5)}, 100)
        assert await asyncio.wait_for(waiting, 1.0) == WarmReply(
            partition=3, loaded=True, offset=9, head=9
        )

        waiting = asyncio.ensure_future(w.answer(held))
        await asyncio.sleep(0.05)
        w.merge(3, 9, 9, 9, {}, 100)  # a batch with nothing new for it is a step too
        assert (await asyncio.wait_for(waiting, 1.0)).offset == 9

        waiting = asyncio.ensure_future(w.answer(held))
        await asyncio.sleep(0.05)
        assert w.take(3, 9) is not None  # hosted meanwhile: the held call goes
        assert (await asyncio.wait_for(waiting, 1.0)).offset == 9

        w.warm(plain)
        await w.loads_done()
        w.merge(3, 0, 2, 2, {}, 100)
        short = WarmRequest(partition=3, migration_id="m-1", hold_s=0.2)
        started = loop.time()
        assert (await w.answer(short)).offset == 2  # no step came: answered as it stands
        assert loop.time() - started >= 0.19

    asyncio.run(go())


def test_a_batch_in_flight_when_a_host_takes_the_copy_is_the_hosted_partitions_first() -> None:
    """A host that takes the warm copy while a micro-batch reads for it: that batch's records
    go to the hosted partition (which starts where the batch started), not to waste; a
    hosted state that is elsewhere, or a gate that is not open, gets nothing."""
    from types import SimpleNamespace

    from pipeline.holdings import PartitionRuntime
    from pipeline.processing import Processor

    async def go() -> None:
        w, holdings = _warming()
        w.warm(WarmRequest(partition=3, migration_id="m-1"))
        await w.loads_done()
        w.merge(3, 0, 5, 5, {"k": _ks(1.0, 0)}, 100)  # caught up at 5
        starts = w.offsets()  # where the batch in flight reads from
        copy = w.take(3, 5)  # the host, while that batch runs
        assert copy is not None and starts == {3: 5}
        rt = PartitionRuntime(epoch=2)
        rt.state, rt.offset = dict(copy.state), copy.offset
        holdings.parts[3] = rt
        holdings.gates.host(3, 2)
        rt.loaded.set()
        proc = object.__new__(Processor)
        proc.holdings, proc.warming = holdings, w
        proc.settings = SimpleNamespace(max_keys_per_partition=100)  # type: ignore[assignment]
        proc.session = SimpleNamespace(lease_valid=lambda: True)  # type: ignore[assignment]
        proc.stats = {"dead_letter_keys": 0}
        batch = SimpleNamespace(ends={3: 9}, heads={3: 9})
        results = {3: {"k": _ks(2.0, 5)}}
        assert await proc._merge_warm(batch, results, starts) == 1  # type: ignore[arg-type]
        assert rt.offset == 9 and rt.state["k"].count == 2
        # The same batch again: the hosted state is at 9 now, not where it started.
        assert await proc._merge_warm(batch, results, starts) == 0  # type: ignore[arg-type]
        assert rt.offset == 9 and rt.state["k"].count == 2
        holdings.gates.close(3, 2)  # released meanwhile: nothing merges into a closed gate
        rt.offset = 5
        assert await proc._merge_warm(batch, results, starts) == 0  # type: ignore[arg-type]
        assert rt.offset == 5

    asyncio.run(go())
