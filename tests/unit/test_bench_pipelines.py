"""`bench.pipelines`: the rig it measures is the cluster it says (every pipeline's partitions
ONLINE, spread over the pool within slots), a recovery ends only when the dead worker's
partitions have live owners, and a comparison carries every figure and its ratio."""

from __future__ import annotations

from collections import Counter

from bench import pipelines
from coordinator.core.model import PartitionStatus, WorkerState


def test_a_built_rig_is_settled_and_each_pipeline_spread_within_slots() -> None:
    rig = pipelines.build(pipelines=3, partitions_each=4, workers=4)
    state = rig.machine.state

    assert len(state.pipelines) == 3
    assert all(p.status is PartitionStatus.ONLINE for p in state.partitions)
    for name in state.pipelines:
        owners = Counter(p.owner for p in state.partitions.of(name))
        assert sorted(owners.values()) == [1, 1, 1, 1], name  # one on each worker
    slots = {w: rec.profile.slots for w, rec in state.workers.items() if rec.profile}
    held = Counter(p.owner for name in state.pipelines for p in state.partitions.of(name))
    assert all(held[w] <= slots[w] for w in rig.workers)
    assert pipelines.plan_s(rig) >= 0  # it raises if a settled cluster planned anything


def test_a_recovery_ends_with_the_dead_workers_partitions_on_live_workers() -> None:
    rig = pipelines.build(pipelines=1, partitions_each=12, workers=4)
    victim = rig.workers[0]
    owned = {p.partition for p in rig.machine.state.partitions if p.owner == victim}
    assert len(owned) == 4  # 3 of the pipeline's 12, 1 of `default`'s 4

    spent_s, passes = pipelines.recovery(rig, victim)

    state = rig.machine.state
    assert spent_s > 0 and passes >= 1
    assert state.workers[victim].state is WorkerState.DEAD
    for p in owned:
        owner = state.partitions[p].owner
        assert owner is not None and owner != victim
        assert state.workers[owner].state is WorkerState.ACTIVE


def test_a_comparison_has_both_rows_and_every_ratio() -> None:
    shape = pipelines.Shape(pipelines=2, workers=pipelines.DEATHS + 2)
    rows = pipelines.compare(shape, partitions_each=4)

    many, one, ratio = rows["many"], rows["one"], rows["many_over_one"]
    assert (many["pipelines"], many["partitions"], one["pipelines"], one["partitions"]) == (
        2,
        8,
        1,
        8,
    )
    assert all(many[f] > 0 and one[f] > 0 for f in pipelines.RATIO_FIELDS), rows
    assert ratio["memory_mb"] == many["memory_mb"] / one["memory_mb"]
    assert set(ratio) == set(pipelines.RATIO_FIELDS)
