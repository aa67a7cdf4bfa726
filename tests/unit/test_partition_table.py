"""PartitionTable: records found by number, iterated in ascending number, numbers not
assumed contiguous."""

from __future__ import annotations

import pytest

from coordinator.core.model import Epoch, Partition, PartitionId, PartitionStatus
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
    table = PartitionTable([rec(1 << 20), rec(3), rec(0)])
    assert [p.partition for p in table] == [0, 3, 1 << 20]
    assert len(table) == 3
    assert 3 in table and (1 << 20) in table
    assert 1 not in table and 2 not in table  # len() bounds nothing
    assert table[1 << 20].partition == 1 << 20
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
