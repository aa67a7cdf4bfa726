"""`partition_numbers`: the one map between a pipeline's own partition numbers (what routes,
metrics and the CLI speak) and the numbers the partition table carries them under, through
a pipeline's whole lifecycle."""

from __future__ import annotations

from coordinator.core.commands import ActivatePipeline, DropPipeline, ForgetPipeline
from coordinator.core.model import DEFAULT_PIPELINE, SLOT_BASE, PipelineName
from coordinator.core.pipelines import partition_numbers
from coordinator.core.state import ClusterState
from tests.unit.test_core_pipelines import ORDERS, cluster, create, step

CLICKS = PipelineName("clicks")


def test_defaults_numbers_are_its_own_and_unknown_names_have_none() -> None:
    s = cluster(total=8)
    numbers = partition_numbers(s, DEFAULT_PIPELINE)
    assert numbers is not None
    assert [numbers[p] for p in range(8)] == list(range(8))
    assert numbers.index(5) == 5 and SLOT_BASE not in numbers
    # Before Bootstrap too: `default` is always a name, its table merely empty.
    assert partition_numbers(ClusterState(), DEFAULT_PIPELINE) == range(SLOT_BASE)
    assert partition_numbers(s, "nope") is None


def test_a_records_numbers_follow_its_set_up_and_leave_with_it() -> None:
    s = cluster(total=8)
    step(s, create(partitions=4))
    step(s, create(name=CLICKS, partitions=3))
    # CREATING: its partitions are not in the table yet, so no number is its.
    assert partition_numbers(s, ORDERS) == range(0)
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(s, ActivatePipeline(name=CLICKS, incarnation=2, now_ms=102))
    clicks = partition_numbers(s, CLICKS)
    assert clicks is not None and len(clicks) == 3
    # Local -> table -> local, for every partition, and the table agrees whose each is.
    for p in range(3):
        assert s.partitions[clicks[p]].pipeline == CLICKS
        assert clicks.index(clicks[p]) == p
    assert [x.partition for x in s.partitions.of(CLICKS)] == list(clicks)
    # Another pipeline's numbers and `default`'s are not its own.
    orders = partition_numbers(s, ORDERS)
    assert orders is not None
    assert not set(orders) & set(clicks) and 0 not in clicks and orders[0] not in clicks
    step(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=103))
    assert partition_numbers(s, ORDERS) == orders  # DROPPING: its partitions stay till forgot
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=104))
    assert partition_numbers(s, ORDERS) is None
