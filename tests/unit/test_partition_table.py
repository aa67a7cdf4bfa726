"""PartitionTable: records found by number, iterated in ascending number, numbers not
assumed contiguous."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.core.model import (
    DEFAULT_PIPELINE,
    SLOT_BASE,
    Epoch,
    Partition,
    PartitionId,
    PartitionStatus,
    PipelineName,
)
from coordinator.core.partition_table import PartitionTable


def rec(p: int, epoch: int = 0) -> Partition:
    return Partition(
        partition=PartitionId(p),
        owner=None,
        epoch=Epoch(epoch),
        status=PartitionStatus.UNASSIGNED,
        migration=None,
        checkpoint=None,
        history=(),
    )


def test_sparse_numbers_are_found_and_iterated_in_ascending_order() -> None:
    table = PartitionTable([rec(900), rec(3), rec(0)])
    assert [p.partition for p in table] == [0, 3, 900]
    assert len(table) == 3
    assert 3 in table and 900 in table
    assert 1 not in table and 2 not in table  # len() bounds nothing
    assert table[900].partition == 900
    assert table.get(2) is None
    with pytest.raises(KeyError):
        table[2]


def test_put_replaces_in_place_and_keeps_the_order() -> None:
    table = PartitionTable([rec(5), rec(2), rec(9)])
    table.put(rec(5, epoch=7))
    assert [(p.partition, p.epoch) for p in table] == [(2, 0), (5, 7), (9, 0)]
    with pytest.raises(KeyError):
        table.put(rec(4))  # a put never adds a number
    assert 4 not in table


def test_a_copy_shares_records_but_not_later_writes() -> None:
    table = PartitionTable([rec(0), rec(1)])
    copy = table.copy()
    assert copy == table and copy is not table
    table.put(rec(1, epoch=3))
    assert copy[1].epoch == 0 and copy != table


def test_two_records_under_one_number_are_refused() -> None:
    with pytest.raises(ValueError, match="one number"):
        PartitionTable([rec(1), rec(1, epoch=2)])


def test_a_table_never_equals_a_list() -> None:
    records = [rec(0), rec(1)]
    assert PartitionTable(records) != records


def test_a_pipelines_records_are_its_own_and_defaults_are_below_the_base() -> None:
    def of(p: int, pipeline: str) -> Partition:
        return dataclasses.replace(rec(p), pipeline=PipelineName(pipeline))

    table = PartitionTable([rec(1), rec(0), of(SLOT_BASE + 1, "b"), of(SLOT_BASE, "a")])
    assert [p.partition for p in table.of(DEFAULT_PIPELINE)] == [0, 1]
    assert [p.partition for p in table.of("a")] == [SLOT_BASE]
    assert table.count_of(DEFAULT_PIPELINE) == 2 and table.count_of("b") == 1
    assert table.count_of("c") == 0 and list(table.of("c")) == []
    table.add([of(SLOT_BASE + 2, "a")])
    assert [p.partition for p in table.of("a")] == [SLOT_BASE, SLOT_BASE + 2]
    assert table.remove("a") == (of(SLOT_BASE, "a"), of(SLOT_BASE + 2, "a"))
    assert [p.partition for p in table] == [0, 1, SLOT_BASE + 1]
    with pytest.raises(ValueError, match="not above"):
        table.add([of(SLOT_BASE, "a")])  # numbers only grow
    with pytest.raises(ValueError, match="recorded pipeline"):
        table.add([rec(SLOT_BASE + 9)])
    with pytest.raises(ValueError, match="replaced"):
        table.remove(DEFAULT_PIPELINE)
    with pytest.raises(ValueError, match="range"):
        PartitionTable([of(3, "a")])
    with pytest.raises(ValueError, match="is b's"):
        table.put(rec(SLOT_BASE + 1))  # a record never changes pipeline
