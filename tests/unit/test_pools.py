"""Workers that run recorded pipelines (ProfileWorker) and where those pipelines' partitions
go (coordinator/core/pools.py): only into their pool, spread per pipeline, within slots,
never spilled; a dead pool member's partitions to another member in the same DeclareDead;
a drain within the pool."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

import pytest

from coordinator.core import pools
from coordinator.core.commands import (
    ActivatePipeline,
    AssignPartitions,
    DeclareDead,
    DrainWorker,
    DropPipeline,
    ForgetPipeline,
    Ok,
    PausePipeline,
    ProfileWorker,
    RegisterWorker,
)
from coordinator.core.model import (
    SLOT_BASE,
    Label,
    MigrationPhase,
    Pipeline,
    PipelineName,
    WorkerId,
    WorkerProfile,
    WorkerState,
)
from coordinator.core.planner import Planner
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from tests.planner_base import quick_settings
from tests.unit.test_core_pipelines import ORDERS, cluster, create, step
from tests.unit.test_core_state import rejects
from tests.unit.test_planner import run

GPU = (Label(key="gpu", value="true"),)
CLICKS = PipelineName("clicks")
W1, W2, W3, W4 = (WorkerId(f"w{i}") for i in range(1, 5))


def join(
    s: ClusterState, planner: Planner | None, w: WorkerId, labels: tuple[Label, ...], slots: int
) -> None:
    assert isinstance(
        apply(s, f"reg-{w}", RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=0)), Ok
    )
    inc = s.workers[w].incarnation
    profile = ProfileWorker(worker_id=w, incarnation=inc, labels=labels, slots=slots, now_ms=0)
    assert isinstance(apply(s, f"prof-{w}-{inc}", profile), Ok)
    if planner is not None:
        planner.registered(w, 0)


def planner_for(s: ClusterState, total: int = 2) -> Planner:
    settings = quick_settings(total_partitions=total, suspect_after_ms=1_000, dead_after_ms=3_000)
    return Planner(settings, random.Random(1), s, 0)


def with_orders(partitions: int, pool: tuple[Label, ...]) -> tuple[ClusterState, Planner]:
    """A cluster of 2 `default` partitions with `orders` set up, and its planner."""
    s = cluster(total=2)
    planner = planner_for(s)
    step(s, create(partitions=partitions, pool=pool))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    return s, planner


def owners(s: ClusterState, name: str) -> dict[int, WorkerId | None]:
    return {p.partition - SLOT_BASE: p.owner for p in s.partitions.of(name)}


def test_a_profile_is_recorded_for_the_current_incarnation_only() -> None:
    s = cluster()
    apply(s, "r1", RegisterWorker(worker_id=W1, address="http://w1", now_ms=0))
    labels = (Label(key="zone", value="b"), Label(key="gpu", value="true"))
    ok = apply(
        s, "p1", ProfileWorker(worker_id=W1, incarnation=1, labels=labels, slots=8, now_ms=1)
    )
    assert isinstance(ok, Ok) and ok.value.changed
    assert s.workers[W1].profile == WorkerProfile(labels=tuple(sorted(labels)), slots=8)
    again = apply(
        s, "p2", ProfileWorker(worker_id=W1, incarnation=1, labels=labels, slots=8, now_ms=2)
    )
    assert isinstance(again, Ok) and not again.value.changed
    # Kept in a snapshot; a worker without one keeps the bytes of the format before it.
    assert decode_state(encode_state(s)).workers[W1].profile == s.workers[W1].profile
    bad = (
        (dataclasses.replace, {"incarnation": 2}, "conflict", "incarnation"),
        (dataclasses.replace, {"worker_id": W2}, "not_found", "worker_id"),
        (dataclasses.replace, {"slots": 0}, "invalid", "slots"),
        (dataclasses.replace, {"labels": (Label(key="a b", value="c"),)}, "invalid", "labels"),
        (
            dataclasses.replace,
            {"labels": (Label(key="a", value="1"), Label(key="a", value="2"))},
            "invalid",
            "labels",
        ),
    )
    base = ProfileWorker(worker_id=W1, incarnation=1, labels=labels, slots=8, now_ms=3)
    for fn, fields, code, field in bad:
        rejects(s, fn(base, **fields), code, field)
    # A re-registration is a new process: it has no profile until it says its own.
    apply(s, "r2", RegisterWorker(worker_id=W1, address="http://w1", now_ms=4))
    assert s.workers[W1].profile is None


def test_a_pools_partitions_go_to_its_members_spread_within_slots() -> None:
    s, planner = with_orders(6, GPU)
    join(s, planner, W1, GPU, slots=2)
    join(s, planner, W2, (*GPU, Label(key="zone", value="a")), slots=10)
    join(s, planner, W3, (Label(key="gpu", value="false"),), slots=10)  # not in the pool
    apply(s, "r4", RegisterWorker(worker_id=W4, address="http://w4", now_ms=0))  # no profile
    planner.registered(W4, 0)
    run(s, planner, 10)
    got = owners(s, ORDERS)
    assert set(got.values()) == {W1, W2}  # never W3 (other labels) or W4 (no profile)
    assert sum(1 for w in got.values() if w == W1) == 2  # its slots, no more
    assert all(p.owner in (W1, W2, W3, W4) for p in s.partitions.of("default"))
    assert pools.unplaceable(s, s.pipelines[ORDERS], [W1, W2, W3, W4]) == ""


def test_each_pipeline_is_spread_across_its_pool_first() -> None:
    s = cluster(total=2)
    planner = planner_for(s)
    step(s, create(partitions=4, pool=()))
    step(s, create(name=CLICKS, partitions=4, pool=()))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(s, ActivatePipeline(name=CLICKS, incarnation=2, now_ms=102))
    for w in (W1, W2, W3, W4):
        join(s, planner, w, (), slots=100)
    run(s, planner, 10)
    for name in (ORDERS, CLICKS):
        assert sorted(owners(s, name).values()) == [W1, W2, W3, W4], name


def test_a_pool_nobody_serves_stays_unassigned_and_says_why() -> None:
    s, planner = with_orders(3, GPU)
    apply(s, "r1", RegisterWorker(worker_id=W1, address="http://w1", now_ms=0))
    planner.registered(W1, 0)
    run(s, planner, 10)
    p = s.pipelines[ORDERS]
    assert set(owners(s, ORDERS).values()) == {None}
    assert "declared labels and slots" in pools.unplaceable(s, p, [W1])
    join(s, planner, W2, (Label(key="gpu", value="false"),), slots=4)
    run(s, planner, 20)
    assert set(owners(s, ORDERS).values()) == {None}  # no spill into another pool
    assert (
        pools.unplaceable(s, p, [W1, W2]) == "no eligible worker carries the pool's labels gpu=true"
    )
    join(s, planner, W3, GPU, slots=1)
    run(s, planner, 30)
    assert list(owners(s, ORDERS).values()).count(W3) == 1
    assert "every slot" in pools.unplaceable(s, p, [W1, W2, W3])


def test_one_pass_places_a_bounded_number_of_one_pipelines_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pools, "PIPELINE_ASSIGNMENTS_PER_PASS_MAX", 2)
    s = cluster(total=2)
    planner = planner_for(s)
    step(s, create(partitions=5, pool=()))
    step(s, create(name=CLICKS, partitions=1, pool=()))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(s, ActivatePipeline(name=CLICKS, incarnation=2, now_ms=102))
    join(s, planner, W1, (), slots=100)
    done = run(s, planner, 10)
    passes = [
        c.assignments
        for c in done
        if isinstance(c, AssignPartitions) and c.assignments[0].partition >= SLOT_BASE
    ]
    sizes = [len(a) for a in passes]
    first = sorted({s.partitions[a.partition].pipeline for a in passes[0]})
    assert sizes == [3, 2, 1]  # clicks' one rides in the first pass beside orders' first two
    assert first == [CLICKS, ORDERS]
    assert None not in owners(s, ORDERS).values()


def test_a_dead_members_partitions_go_to_another_member_in_the_same_command() -> None:
    s, planner = with_orders(4, GPU)
    join(s, planner, W1, GPU, slots=10)
    join(s, planner, W2, GPU, slots=10)
    join(s, planner, W3, (), slots=10)  # not in the pool: must not receive them
    run(s, planner, 10)
    mine = [n for n, w in owners(s, ORDERS).items() if w == W1]
    assert mine
    late = 10 + 10_000
    for w in (W2, W3):
        planner.heartbeat(w, 0.1, late)
    done = run(s, planner, late)
    (dead,) = [c for c in done if isinstance(c, DeclareDead)]
    assert dead.worker_ids == (W1,)
    assert s.workers[W1].state is WorkerState.DEAD
    assert {owners(s, ORDERS)[n] for n in mine} == {W2}


def test_a_drain_moves_a_pools_partitions_within_the_pool_or_is_refused() -> None:
    s, planner = with_orders(2, GPU)
    join(s, planner, W1, GPU, slots=10)
    join(s, planner, W3, (), slots=10)
    run(s, planner, 10)
    assert set(owners(s, ORDERS).values()) == {W1}
    refused = planner.plan_drain(s, W1, 20)
    assert not isinstance(refused, tuple) and refused.code == "conflict"
    assert "pool" in refused.message
    join(s, planner, W2, GPU, slots=10)
    moves = planner.plan_drain(s, W1, 30)
    assert isinstance(moves, tuple)
    assert {m.target for m in moves if m.partition >= SLOT_BASE} == {W2}
    assert isinstance(apply(s, "drain", DrainWorker(worker_id=W1, moves=moves, now_ms=30)), Ok)


def test_the_tear_down_takes_owned_partitions_and_aborts_their_moves() -> None:
    s, planner = with_orders(4, ())
    join(s, planner, W1, (), slots=10)
    join(s, planner, W2, (), slots=10)
    run(s, planner, 10)
    mine = [p.partition for p in s.partitions.of(ORDERS) if p.owner == W1]
    assert mine and all(p.owner is not None for p in s.partitions.of(ORDERS))
    moves = planner.plan_drain(s, W1, 20)
    assert isinstance(moves, tuple)
    assert isinstance(apply(s, "drain", DrainWorker(worker_id=W1, moves=moves, now_ms=20)), Ok)
    moving = [m for m in s.in_flight_migrations() if m.partition >= SLOT_BASE]
    assert moving
    step(s, DropPipeline(name=ORDERS, purge=True, by="ops", now_ms=30))
    generation = s.generation
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=31))  # the invariants hold
    assert ORDERS not in s.pipelines and list(s.partitions.of(ORDERS)) == []
    assert all(s.migrations[m.migration_id].phase is MigrationPhase.ABORTED for m in moving)
    assert all(p < SLOT_BASE for w in (W1, W2) for p in s.owned_by(w))
    assert s.generation == generation + 1  # owners of (partition, epoch) pairs went
    # W1 still owns a partition of `default` while draining: it has not left.
    assert s.workers[W1].state is WorkerState.DRAINING


def test_waiting_is_every_placed_pipelines_unassigned_partition_by_name_then_number() -> None:
    s = cluster(total=2)
    planner = planner_for(s)
    # Created in an order unlike their names' so that numbers and names disagree.
    for i, name in enumerate(("zeta", "alpha", "mid", "new")):
        step(s, create(name=name, partitions=2, pool=()))
        if name != "new":  # left CREATING: it has no partitions yet
            step(s, ActivatePipeline(name=PipelineName(name), incarnation=i + 1, now_ms=101))
    step(s, PausePipeline(name=PipelineName("mid"), by="ops", now_ms=102))  # still placed
    got = [(p.pipeline, p.partition - SLOT_BASE) for p in pools.waiting(s)]
    assert got == [("alpha", 2), ("alpha", 3), ("mid", 4), ("mid", 5), ("zeta", 0), ("zeta", 1)]
    join(s, planner, W1, (), slots=1)
    run(s, planner, 10)
    (placed,) = [p for p in s.partitions if p.partition >= SLOT_BASE and p.owner is not None]
    assert (placed.pipeline, placed.partition - SLOT_BASE) == ("alpha", 2)  # first in line
    assert [p.partition - SLOT_BASE for p in pools.waiting(s)] == [3, 4, 5, 0, 1]


def test_place_reads_each_pools_members_once_and_keeps_every_pipeline_in_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = cluster(total=2)
    names = [PipelineName(f"gpu{i}") for i in range(3)]
    for i, name in enumerate([*names, CLICKS]):
        step(s, create(name=name, partitions=2, pool=() if name == CLICKS else GPU))
        step(s, ActivatePipeline(name=name, incarnation=i + 1, now_ms=101))
    for w in (W1, W2):
        join(s, None, w, GPU, slots=10)
    join(s, None, W3, (), slots=10)
    reads: list[tuple[Label, ...]] = []
    real = pools.members

    def counted(state: ClusterState, p: Pipeline, eligible: Iterable[WorkerId]) -> list[WorkerId]:
        reads.append(p.pool)
        return real(state, p, eligible)

    monkeypatch.setattr(pools, "members", counted)
    target = pools.place(s, [W1, W2, W3], pools.waiting(s))
    assert sorted(reads) == [(), GPU]  # one scan of the workers per pool, not per pipeline
    for name in names:
        assert sorted(target[p.partition] for p in s.partitions.of(name)) == [W1, W2], name
    # clicks comes first by name, every worker empty: spread, then by id.
    assert sorted(target[p.partition] for p in s.partitions.of(CLICKS)) == [W1, W2]
    assert len(target) == 8
