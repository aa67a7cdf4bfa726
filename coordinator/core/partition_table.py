"""The partition records of the replicated state, by the number each is carried under.

Owns `PartitionTable`: what `ClusterState.partitions` is. A partition is found by its
number (``table[p]``, ``p in table``), and the table iterates its records in ascending
number. Invariant: every record sits under its own ``partition`` field, and iteration is in
ascending number, whatever order records were written in. The table does not assume its
numbers are contiguous from 0 (a number is an identity, not a position), so readers ask
``p in table``, never ``p < len(table)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from coordinator.core.model import Partition, PartitionId

__all__ = ["PartitionTable"]


class PartitionTable:
    """Partition records by number, iterated in ascending number.

    Only `ClusterState` writes it (``put``, and a whole new table at Bootstrap, a rescale's
    StatesBuilt and a snapshot's decode); everyone else reads.
    """

    __slots__ = ("_by_number",)

    def __init__(self, records: Iterable[Partition] = ()) -> None:
        ordered = sorted(records, key=lambda r: r.partition)
        # A dict keeps insertion order: built in ascending number, and `put` only replaces
        # a record in place, so iterating it is iterating in ascending number.
        self._by_number: dict[PartitionId, Partition] = {r.partition: r for r in ordered}
        if len(self._by_number) != len(ordered):
            raise ValueError("two partition records under one number")

    def __getitem__(self, p: int) -> Partition:
        return self._by_number[PartitionId(p)]

    def __contains__(self, p: object) -> bool:
        return p in self._by_number

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._by_number.values())

    def __len__(self) -> int:
        return len(self._by_number)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionTable):
            return NotImplemented
        return list(self._by_number.values()) == list(other._by_number.values())

    __hash__ = None  # type: ignore[assignment]  # mutable: equal tables may not stay equal

    def __repr__(self) -> str:
        return f"PartitionTable({list(self._by_number.values())!r})"

    def get(self, p: int) -> Partition | None:
        return self._by_number.get(PartitionId(p))

    def put(self, record: Partition) -> None:
        """Replace the record under ``record.partition``, which must be in the table."""
        if record.partition not in self._by_number:
            raise KeyError(record.partition)
        self._by_number[record.partition] = record

    def copy(self) -> PartitionTable:
        """A table of the same (frozen, shared) records: a pointer copy per record."""
        out = PartitionTable()
        out._by_number = dict(self._by_number)
        return out
